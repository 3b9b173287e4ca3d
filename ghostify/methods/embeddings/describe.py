"""ALBERT's factorised embeddings (``factorize-embeddings``): see :mod:`ghostify.methods.embeddings`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    embeddings = info.get("embeddings")
    if not embeddings:
        return []
    return [("factorised embeddings",
             f"{embeddings['vocab']} x {embeddings['rank']} + {embeddings['rank']} x {embeddings['width']} "
             f"({human(embeddings['params_after'])}, {human(embeddings['params_saved'])} saved; error {embeddings['error']:.4f})")]
