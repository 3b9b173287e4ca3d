"""The ``ghostify`` command line."""

from .signals import exit_on_signals

with exit_on_signals():  # Ctrl-C while torch and transformers load: `error: interrupted`, exit 130, no traceback
    from . import commands  # noqa: F401  (registers the commands on the app; they import it)
    from .app import app, main, run

__all__ = ["app", "main", "run"]
