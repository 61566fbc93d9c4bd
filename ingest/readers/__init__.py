"""Vendor format readers (in progress)."""
