"""The package's version, below everything that shows it (``--version``, the face)."""

__version__ = "0.1.0"
