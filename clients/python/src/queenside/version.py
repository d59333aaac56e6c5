"""The package's version, and how it introduces itself in hello."""

__version__ = "0.1.0"
CLIENT_NAME = f"queenside-python/{__version__}"
