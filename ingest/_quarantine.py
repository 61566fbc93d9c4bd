"""_quarantine (in progress)."""
