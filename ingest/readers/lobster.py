"""lobster reader (in progress)."""
