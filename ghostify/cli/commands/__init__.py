"""Importing this package registers every command on the Typer app."""

from . import attach_ghost, augment, distill, evaluate, finetune, importance, info, prune, run  # noqa: F401
from . import group_linear  # noqa: F401
from . import factorize_embeddings, share_layers  # noqa: F401
