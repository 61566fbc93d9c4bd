"""bars (in progress)."""
