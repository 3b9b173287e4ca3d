"""Grouped layers: the modules and structural edits (see :mod:`ghostify.methods.grouped`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from ...architectures import ArchitectureAdapter, LayerPaths
from .settings import MODULES

#: which side of each projection is the residual stream (a run-time gather when permuted)
_RUNTIME_INPUT = {"query", "key", "value", "qkv", "ffn_up", "ffn_gate"}


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


def share_qkv_gather(adapter: ArchitectureAdapter, layer: nn.Module, paths: LayerPaths) -> None:
    """Q, K and V read the same hidden states in the same order: gather them once, not three times."""
    if paths.qkv:
        return  # one fused projection: one gather already
    modules = [adapter.submodule(layer, p) for p in (paths.query, paths.key, paths.value)]
    if all(isinstance(m, GroupedLinear) and m.input_index is not None for m in modules):
        if all(torch.equal(m.input_index, modules[0].input_index) for m in modules):
            gather = SharedGather(len(modules))
            for m in modules:
                m.shared_gather = gather


def paths_of(modules: Sequence[str], paths: LayerPaths) -> list[tuple[str, str]]:
    """(LayerPaths attribute, submodule path) of every chosen projection the family has."""
    return [(attr, getattr(paths, attr)) for name in modules for attr in MODULES[name] if getattr(paths, attr)]
