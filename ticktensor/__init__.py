"""ticktensor: market data to versioned stores, and a fast windowed loader."""

__version__ = "0.1.0"
