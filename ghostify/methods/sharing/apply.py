"""Cross-layer sharing: changing a model, and its record entry (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import GhostifyError
from ...flops import count_params
from ...record import GhostifyRecord
from ..base import Context, Entry, check_order
from .modules import _per_step, _share_config_groups, _share_slots
from .settings import SHARING_RECORD_FORMAT, ShareSettings, plan_groups


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


def share(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord, groups: int,
          init: str = ShareSettings.init) -> GhostifyRecord:
    """Share the layers of ``model`` in ``groups`` contiguous groups, in place; returns the new record.

    Example:
        >>> from ghostify.testing import tiny_model
        >>> from ghostify.architectures import get_adapter
        >>> from ghostify.methods.pruning import dense_record
        >>> model = tiny_model("bert", num_hidden_layers=4)
        >>> adapter = get_adapter(model.config)
        >>> record = share(model, adapter, dense_record(model, adapter), groups=2, init="mean")
        >>> adapter.layer_applications(model)
        [2, 2]
    """
    ShareSettings(groups=groups, init=init)  # refuses an unknown init
    check_order("sharing", record)  # called from Python; the command checked it before reading the weights
    return _share(model, adapter, record, groups, init)


def _share(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord, groups: int, init: str) -> GhostifyRecord:
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
                   methods={**record.methods, "sharing": sharing}, history=list(record.history))


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: GhostifyRecord | None, settings: ShareSettings) -> None:
    adapter = get_adapter(config)
    plan = plan_groups(adapter, config, settings.groups)  # refuses a bad --groups before loading weights
    if len(plan) == adapter.num_layers(config):
        warnings.warn(f"--groups {settings.groups} gives every layer its own group: nothing is shared", stacklevel=2)


def apply(model: nn.Module, record: GhostifyRecord, settings: ShareSettings, context: Context) -> Entry:
    shared = _share(model, get_adapter(model.config), record, settings.groups, settings.init)
    data = dict(shared.methods["sharing"])
    return Entry(format=data.pop("format"), data=data, heads=shared.heads, ffn=shared.ffn)
