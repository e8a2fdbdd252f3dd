"""zoo package (in progress)."""
