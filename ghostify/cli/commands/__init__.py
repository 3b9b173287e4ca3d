"""Importing this package registers every command on the Typer app (the structural methods'
commands are generated from the registry: :mod:`.methods`)."""

from . import augment, bench, compress, distill, evaluate, export, finetune, importance, info, latency, methods, run  # noqa: F401
from ..app import sort_commands

sort_commands()
