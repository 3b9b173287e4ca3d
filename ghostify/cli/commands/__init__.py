"""Importing this package registers every command on the Typer app (the structural methods'
commands are generated from the registry: :mod:`.methods`)."""

from . import augment, bench, compress, distill, evaluate, export, finetune, importance, info, latency, methods, run  # noqa: F401
from ..app import app

# --help lists the commands by name, wherever they were declared
app.registered_commands.sort(key=lambda command: command.name or command.callback.__name__.replace("_", "-"))
