"""The ``ghostify`` command line."""

from .app import app, main, run

__all__ = ["app", "main", "run"]
