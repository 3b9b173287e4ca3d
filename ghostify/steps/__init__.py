"""One function per command: what the CLI and recipes call, with the options as arguments."""

from .importance import importance
from .info import info
from .prune import prune

__all__ = ["importance", "info", "prune"]
