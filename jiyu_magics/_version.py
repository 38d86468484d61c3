"""The package version, apart from the package root (whose hooks import the magics and the server)."""

__version__ = "0.1.0"
