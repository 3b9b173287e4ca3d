"""Helpers shared by the steps: devices, tokenizers, and reading a model with its record."""

from __future__ import annotations

import os

import torch

from ..errors import CheckpointError


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_tokenizer(source: str | os.PathLike):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"no usable tokenizer in {source} ({type(exc).__name__}); copy the tokenizer files of the original model into it"
        ) from exc
