"""arrow reader (in progress)."""
