"""Cross-layer sharing: changing a model, and its record entry (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import GhostifyError
from ...flops import count_params
from ...record import GhostifyRecord
from ..base import check_order
from .modules import _per_step, _share_config_groups, _share_slots
from .settings import INITS, SHARING_RECORD_FORMAT, plan_groups


def check_shareable(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord, groups: list[list[int]]) -> None:
    """Refuse groups whose layers differ in structure (pruned to different widths)."""
    per_step = _per_step(model, adapter)
    order = adapter.layer_order(model)
    for g, group in enumerate(groups):
        for j in range(per_step):
            widths = {(record.heads_per_layer[order[i * per_step + j]], record.ffn[order[i * per_step + j]]) for i in group}
            if len(widths) > 1:
                raise GhostifyError(
                    f"group {g} (layers {group[0]}-{group[-1]}) mixes layers pruned to different widths "
                    f"(heads, FFN) {sorted(widths)}; share-layers before prune (ghostify share-layers, then prune)"
                )


def share(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord, groups: int, init: str = "mean") -> GhostifyRecord:
    """Share the layers of ``model`` in ``groups`` contiguous groups, in place; returns the new record.

    Example:
        >>> from ghostify.testing import tiny_model
        >>> from ghostify.architectures import get_adapter
        >>> from ghostify.methods.pruning import dense_record
        >>> model = tiny_model("bert", num_hidden_layers=4)
        >>> adapter = get_adapter(model.config)
        >>> record = share(model, adapter, dense_record(model, adapter), groups=2)
        >>> adapter.layer_applications(model)
        [2, 2]
    """
    if init not in INITS:
        raise GhostifyError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    check_order("sharing", record)
    plan = plan_groups(adapter, model.config, groups)
    check_shareable(model, adapter, record, plan)
    per_step = _per_step(model, adapter)
    old_order = adapter.layer_order(model)
    params_before = count_params(model)
    if adapter.config_groups is not None:
        _share_config_groups(model, adapter, plan, init)
    else:
        _share_slots(model, adapter, plan, init)
    # the record lists distinct layers: each new one takes the structure of its first step's layer
    new_order = adapter.layer_order(model)
    first_position = {}
    for position, layer in enumerate(new_order):
        first_position.setdefault(layer, position)
    source = [old_order[first_position[d]] for d in range(len(first_position))]
    sharing = {
        "format": SHARING_RECORD_FORMAT,
        "groups": plan,
        "init": init,
        "layers_per_step": per_step,
        "params_before": params_before,
        "params_after": count_params(model),
    }
    return replace(record, heads=[list(record.heads[i]) for i in source], ffn=[record.ffn[i] for i in source],
                   sharing=sharing, history=list(record.history))


def describe_groups(sharing: dict[str, Any] | None) -> str:
    """``"12 layers in 3 groups of 4,4,4 (init mean)"``, or ``"none"``."""
    if not sharing:
        return "none"
    groups = sharing["groups"]
    sizes = ",".join(str(len(g)) for g in groups)
    return f"{sum(len(g) for g in groups)} layers in {len(groups)} groups of {sizes} (init {sharing.get('init')})"
