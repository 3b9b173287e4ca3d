"""Multiplicative gates on heads and FFN neurons, installed as forward pre-hooks.

transformers 5.x has no ``head_mask``; instead a gate multiplies each attention unit's slice of the
input of the attention-output projection O (a unit is a head, or with grouped-query attention the
query heads of one key/value head), and each neuron's input to the FFN down projection (for gated
FFNs, the product of its activation and its gate). This works
the same under eager, SDPA or flash attention, since it acts after the attention kernel.

A gate tensor has shape ``(units,)`` (one gate for the whole batch) or ``(batch, units)`` (one per
example, so that a single backward pass yields every example's own gate derivative).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ...architectures import ArchitectureAdapter, attention_units, ffn_units


@dataclass
class Gates:
    """Per-layer gate tensors; replace the tensors between forward passes as needed."""

    heads: list[torch.Tensor]  # one gate per attention unit (a head, or a key/value group)
    ffn: list[torch.Tensor]
    head_size: int  # channels per unit in the output projection's input
    _handles: list = field(default_factory=list, repr=False)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _gate_heads(gates: Gates, layer: int):
    def hook(module: nn.Module, args: tuple) -> tuple:
        x = args[0]
        gate = gates.heads[layer].to(x.dtype)
        shape = x.shape
        x = x.reshape(*shape[:-1], -1, gates.head_size)
        if gate.dim() == 1:
            x = x * gate[:, None]
        else:  # (batch, heads): broadcast over the sequence
            x = x * gate.view(gate.shape[0], *([1] * (x.dim() - 3)), gate.shape[1], 1)
        return (x.reshape(shape), *args[1:])

    return hook


def _gate_neurons(gates: Gates, layer: int):
    def hook(module: nn.Module, args: tuple) -> tuple:
        x = args[0]
        gate = gates.ffn[layer].to(x.dtype)
        if gate.dim() == 2:
            gate = gate.view(gate.shape[0], *([1] * (x.dim() - 2)), gate.shape[1])
        return (x * gate, *args[1:])

    return hook


@contextlib.contextmanager
def gated(
    model: nn.Module,
    adapter: ArchitectureAdapter,
    heads: Sequence[torch.Tensor] | None = None,
    ffn: Sequence[torch.Tensor] | None = None,
) -> Iterator[Gates]:
    """Install gates (all ones unless given) for the duration of the ``with`` block.

    Example:
        >>> with gated(model, adapter) as gates:                   # doctest: +SKIP
        ...     gates.heads[0] = torch.tensor([1.0, 0.0, 1.0, 1.0])  # silence head 1 of layer 0
        ...     out = model(**batch)
    """
    layers = adapter.layers(model)
    device = next(model.parameters()).device
    paths = [adapter.paths_for_layer(layer) for layer in layers]
    if heads is None:
        heads = [torch.ones(attention_units(adapter, layer, model.config), device=device) for layer in layers]
    if ffn is None:
        ffn = [torch.ones(ffn_units(adapter, layer), device=device) for layer in layers]
    gates = Gates(heads=list(heads), ffn=list(ffn), head_size=adapter.unit_width(model.config))
    try:
        for i, (layer, p) in enumerate(zip(layers, paths)):
            out_proj = adapter.submodule(layer, p.attention_output)
            down = adapter.submodule(layer, p.ffn_down)
            gates._handles.append(out_proj.register_forward_pre_hook(_gate_heads(gates, i)))
            gates._handles.append(down.register_forward_pre_hook(_gate_neurons(gates, i)))
        yield gates
    finally:
        gates.remove()
