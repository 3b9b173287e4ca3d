"""Helpers shared by the steps: devices, tokenizers and lengths (from their own modules, which
feature packages use too), and counts that must be positive."""

from __future__ import annotations

from ..device import default_device
from ..errors import GhostifyError
from ..tokenization import SPECIAL_TOKENS, check_max_length, check_same_tokenizer, load_tokenizer, max_tokens


def check_positive(**values: int | None) -> None:
    """Counts that must be at least 1 (the CLI enforces them; recipes and Python callers too)."""
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise GhostifyError(f"--{name.replace('_', '-')} {value!r} must be a whole number of at least 1")


__all__ = ["SPECIAL_TOKENS", "check_max_length", "check_positive", "check_same_tokenizer", "default_device",
           "load_tokenizer", "max_tokens"]
