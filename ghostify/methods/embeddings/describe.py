"""ALBERT's factorised embeddings (``factorize-embeddings``): see :mod:`ghostify.methods.embeddings`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    e = info.get("embeddings")
    if not e:
        return []
    return [("factorised embeddings",
             f"{e['vocab']} x {e['width']} -> {e['vocab']} x {e['rank']} + {e['rank']} x {e['width']}: "
             f"{human(e['params_before'])} -> {human(e['params_after'])} parameters ({e['params_saved']:,} saved); "
             f"relative reconstruction error {e['error']:.4f}")]
