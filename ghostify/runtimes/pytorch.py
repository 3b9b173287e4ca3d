"""PyTorch: the checkpoint itself, in eager mode (no export: ``bench`` and ``eval`` load it with ghostify)."""

from __future__ import annotations

from .base import Runtime


def _versions(int8: bool) -> list[str]:
    import torch
    import transformers  # its modeling code is what runs

    return [f"torch {torch.__version__}", f"transformers {transformers.__version__}"]


RUNTIME = Runtime(
    name="pytorch",
    title="PyTorch",
    format_title="PyTorch",
    summary="the checkpoint in eager PyTorch (no export)",
    extra=None,
    packages=("torch", "transformers"),
    versions=_versions,
)
