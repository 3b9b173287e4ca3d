"""The ``ghostify`` command line."""

from . import commands  # noqa: F401,E402  (registers the commands on the app; they import it)
from .app import app, main, run

__all__ = ["app", "main", "run"]
