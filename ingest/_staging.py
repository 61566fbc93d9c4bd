"""_staging (in progress)."""
