"""Grouped position-wise layers (SqueezeBERT, Iandola et al., 2020).

A fully-connected layer applied to every token is a 1x1 convolution; with G groups its weight is
block-diagonal: output block g (out/G channels) reads only input block g (in/G channels), so
parameters and FLOPs fall by G. ``group_linear`` replaces the chosen projections of every encoder
layer by :class:`GroupedLinear` modules initialised from the dense weights' diagonal blocks.

Which channels share a block is free to choose. ``permute=True`` searches for the balanced
co-clustering of rows and columns that keeps most of the weights' squared Frobenius norm in the
blocks (alternating balanced assignment, best seen kept). Channel orders that neighbouring weights
can absorb cost nothing: the heads (rows of Q, K, V with the columns of O; whole heads, so Q and
K keep one order within each head and MPNet/DeBERTa position terms follow through pruning's
``set_heads``) and the FFN's intermediate channels (rows of FFN-up with the columns of FFN-down)
are reordered in the dense weights. Orders of the residual stream (inputs of Q, K, V and FFN-up,
outputs of O and FFN-down) change what neighbouring LayerNorms and residual sums see, so they are
applied at run time by an index gather whose index is a buffer saved with the weights (Q, K and V
share one input order and one gather).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .architectures import ArchitectureAdapter, LayerPaths, get_adapter
from .errors import CheckpointError, GhostifyError
from .pruning.surgery import prune_layer

GROUPED_RECORD_FORMAT = 1
#: user-facing module names -> LayerPaths attributes
MODULES: dict[str, tuple[str, ...]] = {
    "qkv": ("query", "key", "value"),
    "o": ("attention_output",),
    "ffn": ("ffn_up", "ffn_down"),
}
#: which side of each projection is the residual stream (a run-time gather when permuted)
_RUNTIME_INPUT = {"query", "key", "value", "ffn_up"}
_RUNTIME_OUTPUT = {"attention_output", "ffn_down"}


# ----------------------------------------------------------------------------------------------
# the module
# ----------------------------------------------------------------------------------------------
def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` (..., in) times the block-diagonal ``weight`` (G, out/G, in/G), plus ``bias`` (out,).

    Forward choice, measured on CPU with 1 thread (benchmarks/README.md, "Grouped layers"):
    G = 1 is ``F.linear`` (bit-identical to the dense layer). Without autograd, one ``addmm`` per
    group writes straight into its column slice of the output (no concatenation copy, no
    transposed copies of the input); it was the fastest of grouped ``conv1d`` (needs a
    channels-first copy), ``bmm``/``einsum`` over a (G, N, in/G) transpose (two copies), and
    ``baddbmm``, by up to 1.4x at 4096 tokens. ``out=`` is not differentiable, so with autograd
    one ``baddbmm`` (one node, one copy each way) runs instead.
    """
    groups, out_g, in_g = weight.shape
    if groups == 1:
        return F.linear(x, weight[0], bias)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, groups * in_g)
    n = x2.shape[0]
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        xg = x2.view(n, groups, in_g).transpose(0, 1)
        if bias is None:
            y = torch.bmm(xg, weight.transpose(1, 2))
        else:
            y = torch.baddbmm(bias.view(groups, 1, out_g), xg, weight.transpose(1, 2))
        return y.transpose(0, 1).reshape(*lead, groups * out_g)
    y = torch.empty(n, groups, out_g, dtype=torch.result_type(x2, weight), device=x2.device)
    xs = x2.view(n, groups, in_g)
    for g in range(groups):
        if bias is None:
            torch.mm(xs[:, g], weight[g].t(), out=y[:, g])
        else:
            torch.addmm(bias[g * out_g : (g + 1) * out_g], xs[:, g], weight[g].t(), out=y[:, g])
    return y.view(*lead, groups * out_g)


class SharedGather:
    """One run-time gather for projections that read the same tensor in the same channel order
    (Q, K and V of a layer): the first computes ``x[..., index]``, the others reuse it. The input
    is held by a weak reference and its version counter, so a freed, reallocated or modified
    tensor is never mistaken for it; the result is dropped once every reader had it."""

    def __init__(self, readers: int) -> None:
        self.readers = readers
        self._source: weakref.ref | None = None
        self._version = -1
        self._result: torch.Tensor | None = None
        self._left = 0

    def __call__(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        version = _version(x)
        if self._left > 0 and self._source is not None and self._source() is x and version == self._version:
            result = self._result
            self._left -= 1
            if self._left == 0:
                self._source, self._result = None, None
            return result
        result = gather_channels(x, index)
        self._source, self._version, self._result, self._left = weakref.ref(x), version, result, self.readers - 1
        return result

    def __deepcopy__(self, memo) -> "SharedGather":
        return SharedGather(self.readers)  # state is per forward pass, never copied


def gather_channels(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[..., index]`` as a 2-D ``index_select``: on a 3-D tensor torch's CPU kernel for the last
    dimension is 6-13x slower (1 thread, 4,096 tokens x 768: 52 ms against 4 ms)."""
    return x.reshape(-1, x.shape[-1]).index_select(1, index).view(x.shape[:-1] + (index.numel(),))


def _version(x: torch.Tensor) -> int:
    # inference tensors have no version counter; within one attention block nothing writes to
    # the hidden states between the Q, K and V projections
    return -2 if x.is_inference() else x._version


class GroupedLinear(nn.Module):
    """A position-wise projection with a block-diagonal weight stored as (G, out/G, in/G).

    ``input_index`` (optional buffer): the layer reads ``x[..., input_index]``; ``output_index``
    (optional buffer): its block outputs are put back in the original channel order by
    ``y[..., output_index]``. ``bias`` is in the original output order.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        groups: int,
        *,
        bias: bool = True,
        input_index: bool = False,
        output_index: bool = False,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if groups < 1 or in_features % groups or out_features % groups:
            raise ValueError(f"{groups} groups do not divide {in_features} inputs and {out_features} outputs")
        self.in_features, self.out_features, self.groups = in_features, out_features, groups
        self.weight = nn.Parameter(torch.empty(groups, out_features // groups, in_features // groups, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None
        self.input_index: torch.Tensor | None
        self.output_index: torch.Tensor | None
        self.register_buffer("input_index", torch.arange(in_features, device=device) if input_index else None)
        self.register_buffer("output_index", torch.arange(out_features, device=device) if output_index else None)
        self.shared_gather: SharedGather | None = None  # set for Q, K, V (same input, same order)
        nn.init.kaiming_uniform_(self.weight.view(out_features, -1), a=math.sqrt(5))

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        groups: int,
        *,
        input_order: torch.Tensor | None = None,
        output_order: torch.Tensor | None = None,
    ) -> "GroupedLinear":
        """The diagonal blocks of ``linear`` after ordering its inputs by ``input_order`` and its
        outputs by ``output_order`` (original channel indices, block by block)."""
        w = linear.weight.detach()
        new = cls(linear.in_features, linear.out_features, groups, bias=linear.bias is not None,
                  input_index=input_order is not None, output_index=output_order is not None,
                  device=w.device, dtype=w.dtype)
        if input_order is not None:
            w = w.index_select(1, input_order.to(w.device))
            new.input_index.copy_(input_order)
        if output_order is not None:
            w = w.index_select(0, output_order.to(w.device))
            new.output_index.copy_(torch.argsort(output_order))
        with torch.no_grad():
            new.weight.copy_(diagonal_blocks(w, groups))
            if linear.bias is not None:
                new.bias.copy_(linear.bias.detach())
        new.weight.requires_grad_(linear.weight.requires_grad)
        if new.bias is not None:
            new.bias.requires_grad_(linear.bias.requires_grad)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_index is not None:
            gather = self.shared_gather
            x = gather(x, self.input_index) if gather is not None else gather_channels(x, self.input_index)
        if self.output_index is None:
            return grouped_matmul(x, self.weight, self.bias)
        y = gather_channels(grouped_matmul(x, self.weight), self.output_index)
        return y if self.bias is None else y.add_(self.bias)  # index_select's output is fresh

    def dense_weight(self) -> torch.Tensor:
        """The equivalent (out, in) weight in the original channel orders (zeros off the blocks)."""
        w = torch.block_diag(*self.weight.detach())
        if self.output_index is not None:
            w = w.index_select(0, self.output_index)
        if self.input_index is not None:
            w = w.index_select(1, torch.argsort(self.input_index))
        return w

    def extra_repr(self) -> str:
        gathers = [n for n in ("input_index", "output_index") if getattr(self, n) is not None]
        return (f"in_features={self.in_features}, out_features={self.out_features}, groups={self.groups}, "
                f"bias={self.bias is not None}" + (f", gathers={'+'.join(gathers)}" if gathers else ""))


def diagonal_blocks(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """(out, in) -> (G, out/G, in/G): the blocks on the diagonal."""
    out_f, in_f = weight.shape
    o, i = out_f // groups, in_f // groups
    return torch.stack([weight[g * o : (g + 1) * o, g * i : (g + 1) * i] for g in range(groups)])


# ----------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------
def parse_modules(modules: str | Sequence[str]) -> list[str]:
    """``"qkv,ffn"`` -> ``["qkv", "ffn"]`` (validated, in canonical order)."""
    names = [m.strip() for m in (modules.split(",") if isinstance(modules, str) else modules) if m and m.strip()]
    unknown = [m for m in names if m not in MODULES]
    if unknown or not names:
        raise GhostifyError(
            f"--modules {','.join(names) or repr(modules)}: {'unknown ' + ', '.join(unknown) if unknown else 'none given'}; "
            f"choose among {', '.join(MODULES)} (comma-separated, e.g. qkv,ffn)"
        )
    return [m for m in MODULES if m in names]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_groups(groups: int, dims: dict[str, set[int]]) -> None:
    """``dims`` maps a module name to the widths its projections have (every layer)."""
    if groups < 1:
        raise GhostifyError(f"--groups {groups}: must be at least 1 (1 keeps the layers dense)")
    bad = {name: sorted(d for d in widths if d % groups) for name, widths in dims.items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        common = math.gcd(*[d for widths in dims.values() for d in widths])
        name, widths = next(iter(bad.items()))
        raise GhostifyError(
            f"--groups {groups} does not divide the {name} width {widths[0]}; valid --groups for "
            f"--modules {','.join(dims)} on this model: {', '.join(map(str, _divisors(common)))}"
        )


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
def _paths_of(modules: Sequence[str], paths: LayerPaths) -> list[tuple[str, str]]:
    """(LayerPaths attribute, submodule path) of every chosen projection."""
    return [(attr, getattr(paths, attr)) for name in modules for attr in MODULES[name]]


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
    permute: bool = True,
) -> GroupingResult:
    """Replace the chosen projections of every distinct encoder layer by grouped ones, in place.

    Updates ``record.heads`` when heads are reordered (their original indices, as after pruning).
    Returns the channel orders and the kept fraction of the squared Frobenius norm.
    """
    result = GroupingResult(groups=groups, modules=list(modules), permute=permute)
    head_size = adapter.head_size(model.config)
    layers = adapter.layers(model)
    # check every layer before touching any
    planned = []
    for index, layer in enumerate(layers):
        paths = adapter.paths_for_layer(layer)
        linears = {attr: _layer_problem(adapter, layer, index, path) for attr, path in _paths_of(modules, paths)}
        widths: dict[str, set[int]] = {}
        for name in modules:
            widths[name] = {d for attr in MODULES[name] for d in (linears[attr].in_features, linears[attr].out_features)}
        check_groups(groups, widths)
        planned.append((layer, paths, linears))
    for index, (layer, paths, linears) in enumerate(planned):
        axes, matrices = _problem(linears, head_size)
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
            query = adapter.submodule(layer, paths.query)
            n_heads = query.out_features // head_size
            ffn = adapter.submodule(layer, paths.ffn_up).out_features
            head_order = orders["heads"][::head_size] // head_size if "heads" in orders else torch.arange(n_heads)
            inter_order = orders.get("inter", torch.arange(ffn)).tolist()
            record.heads[index] = prune_layer(adapter, layer, head_order.tolist(), inter_order, head_size, record.heads[index])
        # run-time orders: the residual stream
        for attr, path in _paths_of(modules, paths):
            linear = adapter.submodule(layer, path)
            inp = orders.get(_axis_names(attr)[1]) if permute and attr in _RUNTIME_INPUT else None
            out = orders.get(_axis_names(attr)[0]) if permute and attr in _RUNTIME_OUTPUT else None
            adapter.set_submodule(layer, path, GroupedLinear.from_linear(linear, groups, input_order=inp, output_order=out))
        share_qkv_gather(adapter, layer, paths)
    return result


def share_qkv_gather(adapter: ArchitectureAdapter, layer: nn.Module, paths: LayerPaths) -> None:
    """Q, K and V read the same hidden states in the same order: gather them once, not three times."""
    modules = [adapter.submodule(layer, p) for p in (paths.query, paths.key, paths.value)]
    if all(isinstance(m, GroupedLinear) and m.input_index is not None for m in modules):
        if all(torch.equal(m.input_index, modules[0].input_index) for m in modules):
            gather = SharedGather(len(modules))
            for m in modules:
                m.shared_gather = gather


def _axis_names(attr: str) -> tuple[str, str]:
    """(row axis, column axis) of a projection within its layer."""
    return {
        "query": ("heads", "attn_in"),
        "key": ("heads", "attn_in"),
        "value": ("heads", "attn_in"),
        "attention_output": ("attn_out", "heads"),
        "ffn_up": ("inter", "ffn_in"),
        "ffn_down": ("ffn_out", "inter"),
    }[attr]


def _problem(linears: dict[str, nn.Linear], head_size: int) -> tuple[dict[str, _Axis], list[_Matrix]]:
    """The axes (heads move whole) and squared weights of one layer's co-clustering."""
    axes: dict[str, _Axis] = {}
    matrices = []
    for attr, linear in linears.items():
        rows, cols = _axis_names(attr)
        sq = linear.weight.detach().to("cpu", torch.float64).square()
        matrices.append(_Matrix(sq, rows, cols))
        for name, size in ((rows, linear.out_features), (cols, linear.in_features)):
            axes.setdefault(name, _Axis(size, head_size if name == "heads" else 1))
    return axes, matrices


def grouped_record(result: GroupingResult) -> dict[str, Any]:
    """What ``record.grouped`` stores: enough to rebuild the modules (the indices are weights)."""
    return {
        "format": GROUPED_RECORD_FORMAT,
        "groups": result.groups,
        "modules": list(result.modules),
        "permute": result.permute,
        "kept_norm": round(result.fraction("kept"), 6),
        "kept_norm_identity": round(result.fraction("kept_identity"), 6),
        "kept_norm_per_layer": [round(layer.kept / layer.total, 6) if layer.total else 1.0 for layer in result.layers],
    }


def restore_grouped(model: nn.Module, adapter: ArchitectureAdapter, record: Any) -> None:
    """Rebuild the grouped modules ``record.grouped`` lists on a freshly built (and pruned) model,
    before its weights load strictly. A no-op without a grouped record."""
    grouped = getattr(record, "grouped", None)
    if not grouped:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    try:
        if int(grouped.get("format", GROUPED_RECORD_FORMAT)) > GROUPED_RECORD_FORMAT:
            raise CheckpointError(f"{source} was written by a newer ghostify (grouped record format {grouped['format']}); upgrade ghostify")
        groups, permute = int(grouped["groups"]), bool(grouped["permute"])
        modules = parse_modules(grouped["modules"])
    except (KeyError, TypeError, ValueError, GhostifyError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"corrupt grouped record in {source}: {exc}; re-create the checkpoint") from exc
    for layer in adapter.layers(model):
        for attr, path in _paths_of(modules, adapter.paths_for_layer(layer)):
            linear = adapter.submodule(layer, path)
            w = linear.weight
            try:
                module = GroupedLinear(linear.in_features, linear.out_features, groups, bias=linear.bias is not None,
                                       input_index=permute and attr in _RUNTIME_INPUT,
                                       output_index=permute and attr in _RUNTIME_OUTPUT, device=w.device, dtype=w.dtype)
            except ValueError as exc:
                raise CheckpointError(f"corrupt grouped record in {source}: {exc}") from exc
            adapter.set_submodule(layer, path, module)
        if permute and "qkv" in modules:
            _share_on_load(adapter, layer)


def module_widths(config, record: Any, modules: Sequence[str]) -> dict[str, set[int]]:
    """The input and output widths of the chosen projections in every layer, from the config and
    the record alone (for checking --groups before loading weights)."""
    adapter = get_adapter(config)
    hidden, head_size = adapter.hidden_size(config), adapter.head_size(config)
    heads = record.heads_per_layer if record is not None else [adapter.num_heads(config)]
    ffn = list(record.ffn) if record is not None else [adapter.ffn_size(config)]
    widths = {
        "qkv": {hidden, *(h * head_size for h in heads)},
        "o": {hidden, *(h * head_size for h in heads)},
        "ffn": {hidden, *ffn},
    }
    return {name: widths[name] for name in modules}


def _share_on_load(adapter: ArchitectureAdapter, layer: nn.Module) -> None:
    """On load the index buffers are filled only afterwards (strict load), and a permuted
    checkpoint's Q, K, V always share one order (``group_linear`` permutes their inputs together)."""
    paths = adapter.paths_for_layer(layer)
    gather = SharedGather(3)
    for path in (paths.query, paths.key, paths.value):
        adapter.submodule(layer, path).shared_gather = gather
