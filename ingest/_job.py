"""_job (in progress)."""
