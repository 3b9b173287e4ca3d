"""ALBERT's factorised embeddings (``factorize-embeddings``): see :mod:`ghostify.embeddings`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..embeddings import restore_embeddings
from ..units import human
from .base import Method


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    embeddings = info.get("embeddings")
    if not embeddings:
        return []
    return [("factorised embeddings",
             f"{embeddings['vocab']} x {embeddings['rank']} + {embeddings['rank']} x {embeddings['width']} "
             f"({human(embeddings['params_after'])}, {human(embeddings['params_saved'])} saved; error {embeddings['error']:.4f})")]


METHOD = Method(
    name="embeddings", record_key="embeddings", command="factorize-embeddings", noun="factorised embeddings",
    restore=lambda model, adapter, record, source: restore_embeddings(model, record),
    describe=describe,
)
