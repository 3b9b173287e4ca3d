"""One function per command: what the CLI and recipes call, with the options as arguments (the
shared ones as settings dataclasses, ``ghostify.settings``, or as flat keywords)."""

from ..augment import augment
from .attach_ghost import attach_ghost
from .bench import bench
from .distill import distill
from .evaluate import evaluate
from .export import export
from .factorize_embeddings import factorize_embeddings
from .finetune import finetune
from .group_linear import group_linear
from .importance import importance
from .info import info
from .prune import prune
from .share_layers import share_layers

__all__ = ["attach_ghost", "augment", "bench", "distill", "evaluate", "export", "factorize_embeddings", "finetune", "group_linear", "importance", "info", "prune", "share_layers"]
