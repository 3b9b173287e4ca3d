"""Dropped layers: checking the record against the config (see :mod:`ghostify.methods.dropped_layers`).

The config's layer count (and per-layer entries) already build the kept layers, so a freshly
built model has their structure: there is nothing to rebuild, only a record to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import CheckpointError


def check_layers_record(entry: Mapping[str, Any], config: Any, source: str) -> None:
    """Refuse an entry that is not increasing distinct indices of its ``of`` layers, one per layer the config builds."""
    kept, of = entry.get("kept"), entry.get("of")
    if isinstance(of, bool) or not isinstance(of, int) or not isinstance(kept, list) or not kept or any(
            isinstance(i, bool) or not isinstance(i, int) for i in kept):
        raise CheckpointError(f"corrupt ghostify record in {source}: methods.dropped_layers = {dict(entry)!r}: expected kept "
                              "(layer indices) and of (a layer count); re-create the checkpoint")
    if kept != sorted(set(kept)) or kept[0] < 0 or kept[-1] >= of:
        raise CheckpointError(f"corrupt ghostify record in {source}: methods.dropped_layers.kept = {kept!r}: expected "
                              f"increasing indices of the original {of} layers; re-create the checkpoint")
    adapter = get_adapter(config)
    depth = adapter.num_layers(config)
    if len(kept) != depth:
        raise CheckpointError(f"corrupt ghostify record in {source}: methods.dropped_layers.kept lists {len(kept)} layers but "
                              f"the config builds {depth} ({adapter.num_layers_key}); re-create the checkpoint")


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): the config built the kept layers already."""
    entry = record.entry("dropped_layers")
    built = len(adapter.applied_layers(model)) if entry else 0
    if entry and built != len(entry["kept"]):
        raise CheckpointError(f"the layers record of {source} keeps {len(entry['kept'])} layers but the config builds "
                              f"{built}; the checkpoint's config.json was edited or is corrupt")
