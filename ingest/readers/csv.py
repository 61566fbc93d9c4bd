"""csv reader (in progress)."""
