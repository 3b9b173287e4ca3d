"""Grouped layers: changing a model, and its record entry (see :mod:`ghostify.methods.grouped`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...architectures import ArchitectureAdapter, LayerPaths, attention_units, ffn_units, get_adapter
from ...errors import GhostifyError
from ..base import Context, Entry
from ..pruning.modules import prune_layer
from .modules import _RUNTIME_INPUT, _RUNTIME_OUTPUT, GroupedLinear, paths_of, share_qkv_gather
from .settings import GROUPED_RECORD_FORMAT, MODULES, GroupSettings, check_groups, module_widths, parse_modules


# ----------------------------------------------------------------------------------------------
# balanced co-clustering
# ----------------------------------------------------------------------------------------------
@dataclass
class _Axis:
    """One permutable channel dimension of a layer, cut into ``size / unit`` units that move whole."""

    size: int
    unit: int = 1
    labels: torch.Tensor | None = None  # group of every channel

    def identity(self, groups: int) -> torch.Tensor:
        return torch.arange(self.size) // (self.size // groups)

    def movable(self, groups: int) -> bool:
        return (self.size // self.unit) % groups == 0


@dataclass
class _Matrix:
    sq: torch.Tensor  # squared weights (out, in), float64 on CPU
    rows: str
    cols: str


@dataclass
class LayerGrouping:
    """The co-clustering of one layer: channel orders (block by block) per axis, and kept norms."""

    orders: dict[str, torch.Tensor]
    kept: float
    kept_identity: float
    total: float


@dataclass
class GroupingResult:
    groups: int
    modules: list[str]
    permute: bool
    layers: list[LayerGrouping] = field(default_factory=list)

    def fraction(self, which: str = "kept") -> float:
        total = sum(layer.total for layer in self.layers)
        return sum(getattr(layer, which) for layer in self.layers) / total if total else 1.0


def _kept(matrices: list[_Matrix], labels: dict[str, torch.Tensor]) -> float:
    return float(sum(m.sq[labels[m.rows][:, None] == labels[m.cols][None, :]].sum() for m in matrices))


def _balanced_assignment(affinity: torch.Tensor, groups: int) -> torch.Tensor:
    """Assign each unit (row of ``affinity``, units x G) to a group, U/G units per group,
    greedily by descending affinity."""
    units = affinity.shape[0]
    capacity = [units // groups] * groups
    labels = [-1] * units
    order = torch.argsort(affinity.flatten(), descending=True).tolist()
    left = units
    for flat in order:
        u, g = divmod(flat, groups)
        if labels[u] < 0 and capacity[g] > 0:
            labels[u] = g
            capacity[g] -= 1
            left -= 1
            if left == 0:
                break
    return torch.tensor(labels)


def co_cluster(axes: dict[str, _Axis], matrices: list[_Matrix], groups: int, *, rounds: int = 10,
               restarts: int = 4, seed: int = 0) -> tuple[dict[str, torch.Tensor], float, float]:
    """Alternating balanced assignment, started from the identity blocks and from ``restarts``
    seeded random balanced ones (alternation finds local optima); returns the best labels seen,
    their kept squared norm and the identity's."""
    identity_labels = {name: axis.identity(groups) for name, axis in axes.items()}
    identity = _kept(matrices, identity_labels)
    best, best_kept = dict(identity_labels), identity
    movable = [name for name, axis in axes.items() if axis.movable(groups)]
    generator = torch.Generator().manual_seed(seed)
    for start in range(restarts + 1):
        labels = dict(identity_labels)
        if start:
            for name in movable:
                axis = axes[name]
                units = torch.randperm(axis.size // axis.unit, generator=generator) // (axis.size // axis.unit // groups)
                labels[name] = units.repeat_interleave(axis.unit)
        kept = _kept(matrices, labels)
        for _ in range(rounds):
            before = kept
            for name in movable:
                labels[name] = _reassign(axes[name], name, matrices, labels, groups)
            kept = _kept(matrices, labels)
            if kept > best_kept:
                best_kept, best = kept, dict(labels)
            if kept <= before * (1 + 1e-9):
                break
    return best, best_kept, identity


def _reassign(axis: _Axis, name: str, matrices: list[_Matrix], labels: dict[str, torch.Tensor], groups: int) -> torch.Tensor:
    """The balanced assignment of one axis's units that keeps most norm, the others fixed."""
    affinity = torch.zeros(axis.size, groups, dtype=torch.float64)
    for m in matrices:
        if m.rows == name:
            affinity += m.sq @ F.one_hot(labels[m.cols], groups).to(torch.float64)
        if m.cols == name:
            affinity += m.sq.t() @ F.one_hot(labels[m.rows], groups).to(torch.float64)
    units = affinity.view(axis.size // axis.unit, axis.unit, groups).sum(1)
    return _improve_by_swaps(units, _balanced_assignment(units, groups)).repeat_interleave(axis.unit)


def _improve_by_swaps(affinity: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Swap the best pair of units between two groups while that gains (the greedy assignment is
    not optimal); all group pairs are scored at once."""
    labels = labels.clone()
    units, groups = affinity.shape
    rows = torch.arange(units)
    for _ in range(4 * units):
        move = affinity - affinity[rows, labels][:, None]  # gain of moving unit u to group b
        best = torch.full((groups, groups), float("-inf"), dtype=affinity.dtype)
        best.scatter_reduce_(0, labels[:, None].expand(-1, groups), move, "amax")  # [a, b]: best move a -> b
        pair = best + best.t()
        pair.fill_diagonal_(float("-inf"))
        flat = int(pair.argmax())
        a, b = divmod(flat, groups)
        if not float(pair[a, b]) > 1e-12 * float(affinity.abs().max()):
            break
        u = int(torch.where(labels == a, move[:, b], float("-inf")).argmax())
        v = int(torch.where(labels == b, move[:, a], float("-inf")).argmax())
        labels[u], labels[v] = b, a
    return labels


def _order(labels: torch.Tensor) -> torch.Tensor:
    """Channel indices sorted by group (stable: original order within a group)."""
    return torch.argsort(labels, stable=True)


# ----------------------------------------------------------------------------------------------
# applying and restoring
# ----------------------------------------------------------------------------------------------
def why_not_permutable(adapter: ArchitectureAdapter, config, paths: LayerPaths, modules: Sequence[str]) -> str | None:
    """What in the chosen modules has no free channel order to co-cluster (None: all can be permuted)."""
    if "qkv" in modules and paths.qkv:
        return f"{adapter.family} fuses Q, K and V into one projection ({paths.qkv})"
    if "qkv" in modules and adapter.heads_per_unit(config) > 1:
        return f"{adapter.family}'s keys and values have fewer heads than its queries (grouped-query attention)"
    if "ffn" in modules and paths.ffn_up_gated:
        return f"{adapter.family} fuses the FFN's input and gate halves into one projection ({paths.ffn_up})"
    return None


def _layer_problem(adapter: ArchitectureAdapter, layer: nn.Module, index: int, path: str) -> nn.Linear:
    module = adapter.submodule(layer, path)
    if isinstance(module, GroupedLinear):
        raise GhostifyError(f"layer {index}: {path} is already grouped; group the checkpoint it was made from")
    if type(module) is not nn.Linear:
        raise GhostifyError(
            f"layer {index}: {path} is a {type(module).__name__}, not a plain Linear; run group-linear before attach-ghost"
        )
    return module


def group_linear(
    model: nn.Module,
    adapter: ArchitectureAdapter,
    record: Any,
    *,
    groups: int,
    modules: Sequence[str],
    permute: bool = GroupSettings.permute,
) -> GroupingResult:
    """Replace the chosen projections of every distinct encoder layer by grouped ones, in place.

    Updates ``record.heads`` when heads are reordered (their original indices, as after pruning).
    Returns the channel orders and the kept fraction of the squared Frobenius norm.
    """
    result = GroupingResult(groups=groups, modules=list(modules), permute=permute)
    config = model.config
    unit_width = adapter.unit_width(config)
    layers = adapter.layers(model)
    problem = why_not_permutable(adapter, config, adapter.paths_for_layer(layers[0]), modules) if permute and layers else None
    if problem:
        raise GhostifyError(f"--permute cannot co-cluster --modules {','.join(modules)}: {problem}; "
                            "pass --no-permute to group the channels in their own order")
    # check every layer before touching any
    planned = []
    for index, layer in enumerate(layers):
        paths = adapter.paths_for_layer(layer)
        linears = {attr: _layer_problem(adapter, layer, index, path) for attr, path in paths_of(modules, paths)}
        widths: dict[str, set[int]] = {}
        for name in modules:
            widths[name] = {d for attr in MODULES[name] if attr in linears
                            for d in (linears[attr].in_features, linears[attr].out_features)}
        check_groups(groups, widths)
        planned.append((layer, paths, linears))
    for index, (layer, paths, linears) in enumerate(planned):
        axes, matrices = _problem(linears, unit_width)
        if permute:
            labels, kept, identity = co_cluster(axes, matrices, groups)
        else:
            labels = {name: axis.identity(groups) for name, axis in axes.items()}
            kept = identity = _kept(matrices, labels)
        orders = {name: _order(lab) for name, lab in labels.items()}
        total = float(sum(m.sq.sum() for m in matrices))
        result.layers.append(LayerGrouping(orders=orders, kept=kept, kept_identity=identity, total=total))
        # free orders: reorder whole heads and the FFN's intermediate channels in the dense weights
        if permute and ("heads" in orders or "inter" in orders):
            n_units = attention_units(adapter, layer, config)
            ffn = ffn_units(adapter, layer)
            head_order = orders["heads"][::unit_width] // unit_width if "heads" in orders else torch.arange(n_units)
            inter_order = orders.get("inter", torch.arange(ffn)).tolist()
            record.heads[index] = prune_layer(adapter, layer, config, head_order.tolist(), inter_order, record.heads[index])
        # run-time orders: the residual stream
        for attr, path in paths_of(modules, paths):
            linear = adapter.submodule(layer, path)
            inp = orders.get(_axis_names(attr)[1]) if permute and attr in _RUNTIME_INPUT else None
            out = orders.get(_axis_names(attr)[0]) if permute and attr in _RUNTIME_OUTPUT else None
            adapter.set_submodule(layer, path, GroupedLinear.from_linear(linear, groups, input_order=inp, output_order=out))
        share_qkv_gather(adapter, layer, paths)
    return result


def _axis_names(attr: str) -> tuple[str, str]:
    """(row axis, column axis) of a projection within its layer."""
    return {
        "query": ("heads", "attn_in"),
        "key": ("heads", "attn_in"),
        "value": ("heads", "attn_in"),
        "qkv": ("qkv", "attn_in"),
        "attention_output": ("attn_out", "heads"),
        "ffn_up": ("inter", "ffn_in"),
        "ffn_gate": ("inter", "ffn_in"),
        "ffn_down": ("ffn_out", "inter"),
    }[attr]


def _problem(linears: dict[str, nn.Linear], unit_width: int) -> tuple[dict[str, _Axis], list[_Matrix]]:
    """The axes (attention units move whole) and squared weights of one layer's co-clustering.

    A side whose width differs from its axis's (grouped-query keys and values, a fused gated FFN's
    two halves) gets an axis of its own; such layers are never permuted (``why_not_permutable``), so
    only their kept norm is computed."""
    axes: dict[str, _Axis] = {}
    matrices = []
    for attr, linear in linears.items():
        names = []
        for name, size in zip(_axis_names(attr), (linear.out_features, linear.in_features)):
            if name in axes and axes[name].size != size:
                name = f"{name}/{size}"
            axes.setdefault(name, _Axis(size, unit_width if name == "heads" else 1))
            names.append(name)
        sq = linear.weight.detach().to("cpu", torch.float64).square()
        matrices.append(_Matrix(sq, *names))
    return axes, matrices


def grouped_record(result: GroupingResult) -> dict[str, Any]:
    """What ``record.entry("grouped")`` stores: enough to rebuild the modules (the indices are weights)."""
    return {
        "format": GROUPED_RECORD_FORMAT,
        "groups": result.groups,
        "modules": list(result.modules),
        "permute": result.permute,
        "kept_norm": round(result.fraction("kept"), 6),
        "kept_norm_identity": round(result.fraction("kept_identity"), 6),
        "kept_norm_per_layer": [round(layer.kept / layer.total, 6) if layer.total else 1.0 for layer in result.layers],
    }


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: Any, settings: GroupSettings) -> None:
    check_groups(settings.groups, module_widths(config, record, parse_modules(settings.modules)))


def apply(model: nn.Module, record: Any, settings: GroupSettings, context: Context) -> Entry:
    result = group_linear(model, get_adapter(model.config), record, groups=settings.groups,
                          modules=parse_modules(settings.modules), permute=settings.permute)
    data = grouped_record(result)
    return Entry(format=data.pop("format"), data=data, heads=record.heads, ffn=record.ffn)
