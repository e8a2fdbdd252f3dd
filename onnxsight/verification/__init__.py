"""verification package (in progress)."""
