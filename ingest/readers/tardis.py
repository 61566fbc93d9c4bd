"""tardis reader (in progress)."""
