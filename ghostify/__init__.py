"""ghostify: compress Hugging Face encoders with the GhostBERT recipe.

Example:
    >>> import ghostify
    >>> model = ghostify.load_model("out/pruned")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .errors import GhostifyError
from .version import __version__

__all__ = ["GhostifyError", "__version__", "load_model", "save_checkpoint"]


def __getattr__(name: str) -> Any:
    """``load_model`` and ``save_checkpoint`` on first use: importing the package must stay light,
    so that the CLI handles Ctrl-C before torch and transformers load."""
    if name in ("load_model", "save_checkpoint"):
        from . import checkpoint  # torch and transformers: on first use, not when the package is imported

        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
