"""Cross-layer sharing: the modules and structural edits (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError


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


def _per_step(model: nn.Module, adapter: ArchitectureAdapter) -> int:
    """Layer modules run per step (ALBERT's inner_group_num; 1 elsewhere)."""
    return len(adapter.applied_layers(model)) // adapter.num_layers(model.config)


def declare_shared_tensors(model: nn.Module) -> None:
    """Declare the tensors of shared layers as ties in transformers' mapping (each later name ->
    its first name), so that ``save_pretrained`` writes each once, as for tied embeddings, instead
    of refusing shared tensors, and ``from_pretrained`` ties them back."""
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
    known = set(tied) | set(tied.values())
    first: dict[int, str] = {}
    shared = {}
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) not in first:
            first[id(value)] = key
        elif key not in known and first[id(value)] not in known:
            shared[key] = first[id(value)]
    model.all_tied_weights_keys = {**tied, **shared}  # what from_pretrained ties
    model._tied_weights_keys = {**dict(getattr(model, "_tied_weights_keys", None) or {}), **shared}  # what saving drops
