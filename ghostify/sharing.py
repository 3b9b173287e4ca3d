"""Cross-layer parameter sharing (ALBERT, Lan et al. 2020): the encoder's L layers split into G
contiguous groups, every layer of a group running ONE module (the same object, so the same
tensors), initialised from the group's layers.

Generic code sees shared layers the way it sees ALBERT's: ``adapter.layers()`` lists the distinct
modules, ``adapter.layer_applications()`` how often each runs. A checkpoint stores each shared
tensor once (``checkpoint.alias_keys``) and ``load_model`` rebuilds the sharing from
``record.sharing`` before anything else.

Two kinds of family, told apart by the adapter's ``config_groups`` fact: most run one layer slot
per step (``layers_path``), and sharing puts one module into several slots; ALBERT's config itself
shares groups of layers (``config_groups``), and sharing rebuilds those groups and rewrites the
config's group count, so only equal groups are possible.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from .architectures import ArchitectureAdapter
from .errors import CheckpointError, GhostifyError
from .flops import count_params
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


def plan_groups(adapter: ArchitectureAdapter, config, groups: int) -> list[list[int]]:
    """The steps of each of ``groups`` contiguous groups: sizes differ by at most one, the larger
    groups first (12 steps in 5 groups: 3, 3, 2, 2, 2); equal groups where the config shares."""
    depth = adapter.num_layers(config)
    if adapter.config_groups is not None:
        # the config runs group int(i / (L / G)) at step i: contiguous equal groups only
        if groups < 1 or depth % groups:
            divisors = [g for g in range(1, depth + 1) if depth % g == 0]
            raise GhostifyError(
                f"--groups {groups} does not divide {adapter.family}'s {depth} layers (its config shares equal groups); "
                f"choose one of {divisors}"
            )
        size = depth // groups
        return [list(range(g * size, (g + 1) * size)) for g in range(groups)]
    if not 1 <= groups <= depth:
        raise GhostifyError(f"--groups {groups} must be between 1 and the model's {depth} layers")
    size, extra = divmod(depth, groups)
    out, start = [], 0
    for g in range(groups):
        end = start + size + (1 if g < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def distinct_layers(config, adapter: ArchitectureAdapter, sharing: Any) -> int:
    """How many distinct layers ``config`` builds, given the record's ``sharing`` entry (a family
    whose config shares counts its own groups: share-layers rewrote them)."""
    fact = adapter.config_groups
    if fact is not None:
        return int(getattr(config, fact.count_key)) * int(getattr(config, fact.inner_count_key))
    groups = sharing.get("groups") if isinstance(sharing, dict) else None
    return len(groups) if isinstance(groups, list) and groups else adapter.num_layers(config)


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
    groups = [[int(i) for i in g] for g in groups]
    if adapter.config_groups is not None:
        _restore_config_groups(model, adapter, groups)
    else:
        _restore_slots(model, adapter, groups)


def _share_slots(model: nn.Module, adapter: ArchitectureAdapter, groups: list[list[int]], init: str) -> None:
    """Make the steps of each group run ONE layer module, initialised from the group's layers
    (``mean``: element-wise mean over its steps; ``first``: its first layer)."""
    slots = model.base_model.get_submodule(adapter.layers_path)
    current = list(slots)
    states = [group_state([current[i] for i in group], init) for group in groups]
    used: set[int] = set()
    for group, state in zip(groups, states):
        target = current[group[0]]
        if id(target) in used:  # an earlier group keeps this module: split it off
            target = copy.deepcopy(target)
        used.add(id(target))
        if state is not None:
            target.load_state_dict(state)
        for i in group:
            slots[i] = target


def _restore_slots(model: nn.Module, adapter: ArchitectureAdapter, groups: list[list[int]]) -> None:
    """Rebuild recorded sharing on a freshly built model (weights are loaded afterwards)."""
    slots = model.base_model.get_submodule(adapter.layers_path)
    if sum(len(g) for g in groups) != len(slots):
        raise CheckpointError(
            f"the sharing record covers {sum(len(g) for g in groups)} layers but the config builds {len(slots)}; "
            "the checkpoint's config.json was edited or is corrupt"
        )
    for group in groups:
        for i in group[1:]:
            slots[i] = slots[group[0]]


def _share_config_groups(model: nn.Module, adapter: ArchitectureAdapter, groups: list[list[int]], init: str) -> None:
    """New config groups: group g's inner layer j starts from the mean (or the first) of inner
    layer j of the groups its steps ran before; merging and splitting groups both work."""
    fact = adapter.config_groups
    old_group = adapter.step_groups(model)
    new = []
    for group in groups:
        fresh = copy.deepcopy(old_group[group[0]])
        for j, layer in enumerate(getattr(fresh, fact.inner)):
            state = group_state([getattr(old_group[i], fact.inner)[j] for i in group], init)
            if state is not None:
                layer.load_state_dict(state)
        new.append(fresh)
    adapter.set_submodule(model.base_model, fact.path, nn.ModuleList(new))
    setattr(model.config, fact.count_key, len(groups))


def _restore_config_groups(model: nn.Module, adapter: ArchitectureAdapter, groups: list[list[int]]) -> None:
    # the saved config's group count already built these groups
    fact = adapter.config_groups
    count = getattr(model.config, fact.count_key)
    if len(groups) != count:
        raise CheckpointError(
            f"the sharing record lists {len(groups)} groups but the {adapter.family} config has {fact.count_key}="
            f"{count}; the checkpoint's config.json was edited or is corrupt"
        )


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
