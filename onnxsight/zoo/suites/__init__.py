"""Built-in suites: each module defines ``suite()`` returning ModelSpecs."""
