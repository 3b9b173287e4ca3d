"""Hidden-size pruning (``prune-hidden``): what `ghostify info` prints (see :mod:`ghostify.methods.hidden`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    entry = (info.get("methods") or {}).get("hidden")
    if not entry:
        return []
    kept, of = len(entry["kept"]), entry["of"]
    padded = (f"; the encoder's output padded back to {of} with zeros (--keep-output-dim)"
              if entry.get("keep_output_dim") else "")
    return [("hidden width", f"{kept} of {of} channels ({kept / of:.3g}), heads {entry['head_size']} wide{padded}")]
