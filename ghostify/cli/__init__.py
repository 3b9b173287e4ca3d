"""The ``ghostify`` command line."""

from .app import app, main, run
from . import commands  # noqa: F401,E402  (registers the commands on the app; they import it)

__all__ = ["app", "main", "run"]
