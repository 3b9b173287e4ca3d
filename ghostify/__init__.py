"""ghostify: compress Hugging Face encoders with the GhostBERT recipe.

Example:
    >>> import ghostify
    >>> model = ghostify.load_model("out/pruned")  # doctest: +SKIP
"""

from __future__ import annotations

from .checkpoint import load_model, save_checkpoint
from .errors import GhostifyError
from .version import __version__

__all__ = ["GhostifyError", "__version__", "load_model", "save_checkpoint"]
