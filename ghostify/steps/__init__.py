"""One function per command: what the CLI and recipes call, with the options as arguments."""

from .attach_ghost import attach_ghost
from .augment import augment
from .distill import distill
from .evaluate import evaluate
from .finetune import finetune
from .importance import importance
from .info import info
from .prune import prune

__all__ = ["attach_ghost", "augment", "distill", "evaluate", "finetune", "importance", "info", "prune"]
