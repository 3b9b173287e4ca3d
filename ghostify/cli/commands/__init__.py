"""Importing this package registers every command on the Typer app."""

from . import importance, info, prune  # noqa: F401
