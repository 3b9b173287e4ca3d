"""Helpers shared by the steps: devices, tokenizers, and reading a model with its record."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import CheckpointError


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_tokenizer(source: str | os.PathLike):
    """The tokenizer of a checkpoint; a one-line error when there is none (transformers 5 would
    otherwise build an empty one from a directory without tokenizer files)."""
    from transformers import AutoTokenizer

    from ..checkpoint import TOKENIZER_FILES

    fix = "copy the tokenizer files of the original model into it"
    path = Path(source)
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"no tokenizer files in {source}; {fix}")
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"no usable tokenizer in {source} ({type(exc).__name__}); {fix}") from exc
