"""dbn reader (in progress)."""
