"""parquet reader (in progress)."""
