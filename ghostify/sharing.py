"""Cross-layer parameter sharing (ALBERT, Lan et al. 2020): the encoder's L layers split into G
contiguous groups, every layer of a group running ONE module (the same object, so the same
tensors), initialised from the group's layers.

Generic code sees shared layers the way it sees ALBERT's: ``adapter.layers()`` lists the distinct
modules, ``adapter.layer_applications()`` how often each runs. A checkpoint stores each shared
tensor once (``checkpoint.alias_keys``) and ``load_model`` rebuilds the sharing from
``record.sharing`` before anything else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from .architectures import ArchitectureAdapter
from .errors import CheckpointError, GhostifyError
from .record import GhostifyRecord

INITS = ("mean", "first")
SHARING_RECORD_FORMAT = 1


def group_state(layers: list[nn.Module], init: str) -> dict[str, torch.Tensor] | None:
    """The state one group's shared layer starts from: the element-wise mean of ``layers`` (one
    entry per step, so a layer that already runs twice counts twice), or None to keep the first."""
    if init == "first" or all(layer is layers[0] for layer in layers):
        return None
    states = [layer.state_dict() for layer in layers]
    out = {}
    for key, first in states[0].items():
        if first.is_floating_point():
            out[key] = torch.stack([s[key].to(torch.float64) for s in states]).mean(0).to(first.dtype)
        else:  # integer buffers (position ids, ...) are equal across layers
            out[key] = first.clone()
    return out


def check_order(record: GhostifyRecord | None) -> None:
    """Refuse models whose later structural steps sharing cannot average (from the record alone)."""
    if record is None:
        return
    for present, what, step in (
        (record.ghost, "ghost modules", "attach-ghost"),
        (record.grouped, "grouped layers", "group-linear"),
        (record.references, "reference attention", "distill --references"),
    ):
        if present:
            raise GhostifyError(
                f"the model has {what}; share-layers before {step} (share the checkpoint it was applied to)"
            )


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
        >>> from ghostify.pruning.surgery import dense_record
        >>> model = tiny_model("bert", num_hidden_layers=4)
        >>> adapter = get_adapter(model.config)
        >>> record = share(model, adapter, dense_record(model, adapter), groups=2)
        >>> adapter.layer_applications(model)
        [2, 2]
    """
    if init not in INITS:
        raise GhostifyError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    check_order(record)
    plan = adapter.sharing_groups(model.config, groups)
    check_shareable(model, adapter, record, plan)
    per_step = _per_step(model, adapter)
    old_order = adapter.layer_order(model)
    params_before = _param_count(model)
    adapter.share_layers(model, plan, init)
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
        "params_after": _param_count(model),
    }
    return replace(record, heads=[list(record.heads[i]) for i in source], ffn=[record.ffn[i] for i in source],
                   sharing=sharing, history=list(record.history))


def restore_sharing(model: nn.Module, adapter: ArchitectureAdapter, record: Any) -> None:
    """Rebuild ``record.sharing`` on a freshly built model, before pruning and the strict load."""
    sharing = getattr(record, "sharing", None)
    if not sharing:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    groups = sharing.get("groups") if isinstance(sharing, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, list) and g for g in groups):
        raise CheckpointError(f"corrupt sharing record in {source}: no groups; re-create the checkpoint")
    if int(sharing.get("format", SHARING_RECORD_FORMAT)) > SHARING_RECORD_FORMAT:
        raise CheckpointError(f"{source} was written by a newer ghostify (sharing record format {sharing['format']}); upgrade ghostify")
    adapter.restore_sharing(model, [[int(i) for i in g] for g in groups])


def describe(sharing: dict[str, Any] | None) -> str:
    """``"12 layers in 3 groups of 4,4,4 (init mean)"``, or ``"none"``."""
    if not sharing:
        return "none"
    groups = sharing["groups"]
    sizes = ",".join(str(len(g)) for g in groups)
    return f"{sum(len(g) for g in groups)} layers in {len(groups)} groups of {sizes} (init {sharing.get('init')})"


def _per_step(model: nn.Module, adapter: ArchitectureAdapter) -> int:
    """Layer modules run per step (ALBERT's inner_group_num; 1 elsewhere)."""
    return len(adapter.applied_layers(model)) // adapter.num_layers(model.config)


def _param_count(model: nn.Module) -> int:
    from .flops import count_params

    return count_params(model)
