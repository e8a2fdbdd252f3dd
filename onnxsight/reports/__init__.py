"""reports package (in progress)."""
