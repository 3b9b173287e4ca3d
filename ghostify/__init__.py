"""ghostify: compress Hugging Face encoders with the GhostBERT recipe.

Example:
    >>> import ghostify
    >>> model = ghostify.load_model("out/pruned")  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"

from .checkpoint import load_model, save_checkpoint  # noqa: E402
from .errors import GhostifyError  # noqa: E402

__all__ = ["GhostifyError", "__version__", "load_model", "save_checkpoint"]
