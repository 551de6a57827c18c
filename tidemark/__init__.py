"""Tidemark: live approximate queries over event streams, with error bounds that hold."""

__version__ = "0.1.0"
