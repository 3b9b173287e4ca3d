"""Hidden-size pruning: rebuilding the structure from the record before a strict weight load, and checking
the record against the config (see :mod:`ghostify.methods.hidden`).

The config already builds the embeddings, norms, pooler and task head at the kept width. What it cannot
say for every family is that a head keeps its original width: :func:`restore_attention` rebuilds the
attention projections of the families that derive the head width from ``hidden_size / heads``. A
projection from narrower embeddings that the config no longer builds (the kept width equals ELECTRA's
``embedding_size``) is built again, and a bare encoder recorded with ``--keep-output-dim`` gets its padding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import CheckpointError
from .modules import add_projection, pad_output, restore_attention


def _corrupt(source: str, entry: Mapping[str, Any], why: str) -> CheckpointError:
    return CheckpointError(f"corrupt ghostify record in {source}: methods.hidden = {dict(entry)!r}: {why}; re-create "
                           "the checkpoint")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_hidden_record(entry: Mapping[str, Any], config: Any, source: str) -> None:
    """Refuse an entry that is not increasing distinct channels of its ``of`` ones, one per channel the config
    builds, with a positive head size."""
    kept, of, head_size = entry.get("kept"), entry.get("of"), entry.get("head_size")
    if not (_count(of) and _count(head_size) and isinstance(kept, list) and kept and all(
            isinstance(c, int) and not isinstance(c, bool) for c in kept)):
        raise _corrupt(source, entry, "expected kept (channel indices), of (the original hidden size) and head_size")
    if kept != sorted(set(kept)) or kept[0] < 0 or kept[-1] >= of:
        raise _corrupt(source, entry, f"kept must be increasing indices of the original {of} channels")
    for flag in ("keep_output_dim", "embedding_projection"):
        if not isinstance(entry.get(flag, False), bool):
            raise _corrupt(source, entry, f"{flag} must be true or false")
    adapter = get_adapter(config)
    width = adapter.hidden_size(config)
    if len(kept) != width:
        raise CheckpointError(f"corrupt ghostify record in {source}: methods.hidden.kept lists {len(kept)} channels but "
                              f"the config builds {width} ({adapter.hidden_size_key}); re-create the checkpoint")
    if adapter.head_size_key is None or adapter.head_size(config) != head_size:
        raise CheckpointError(f"corrupt ghostify record in {source}: methods.hidden.head_size = {head_size!r} but the "
                              f"config says {adapter.head_size(config)} ({adapter.head_size_key}); re-create the checkpoint")


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): the recorded head width and embedding projection on a
    freshly built model, and a bare encoder's output padding."""
    entry = record.entry("hidden")
    if not entry:
        return
    config = model.config
    if adapter.hidden_size(config) != len(entry["kept"]):
        raise CheckpointError(f"the hidden-size record of {source} keeps {len(entry['kept'])} channels but the config "
                              f"builds {adapter.hidden_size(config)}; the checkpoint's config.json was edited or is corrupt")
    restore_attention(model, adapter, int(entry["head_size"]))
    if entry.get("embedding_projection") and adapter.embedding_projection is not None:
        add_projection(model, adapter, adapter.embedding_width(config))  # the original mapped narrower embeddings in
    pad_output(model, entry["kept"] if entry.get("keep_output_dim") else None, int(entry["of"]))
