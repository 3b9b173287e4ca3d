"""A multiplicative gate per residual channel, shared by every layer: channel scores and the masked model.

The gate multiplies a channel at every module that *produces* a hidden-width tensor (the attention output
and FFN down projections, every norm, the embedding tables and the embedding projection, a pooler's or a
head's dense layer: :func:`ghostify.architectures.channels.residual_parts`), so that with a channel's gate
at 0 the channel is zero everywhere in the residual stream (a 0/1 mask also multiplies what reads hidden
width, which reaches DeBERTa-v2's relative-position table, read as a weight), post-norm (BERT: the norms' outputs are the
stream) or pre-norm (ModernBERT, EuroBERT: the stream is the embeddings plus the projections' outputs, and
the norms' outputs, whose bias would bring the channel back, are gated too). At 1 nothing changes.

What remains of a zeroed channel are the norms' statistics: a norm still averages over every channel,
zeros included, where the sliced model averages over the kept ones. ``statistics="kept"`` (a 0/1 gate
for the whole batch) computes every norm over the kept channels only: the masked model then equals the
sliced one exactly, which is what ``prune-hidden`` is tested against, and the difference between the two
settings is what the statistics cost.

A gate of shape ``(batch, channels)`` (one per example, as ``ghostify importance`` uses it) gives every
example's own derivative in one backward pass; tensors that are one for the whole batch (DeBERTa-v2's
relative-position embeddings: ``adapter.shared_hidden_modules``) are then left ungated. The same pass
records Minitron's activation score (``record_activation``): the absolute value of each channel at the
output of every norm of the encoder, summed over the non-padding tokens.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ...architectures import ArchitectureAdapter
from ...architectures.channels import ResidualParts
from .modules import parts_of, slice_channels


@dataclass
class ChannelGates:
    """The gate tensor (replace it between forward passes as needed) and what the pass recorded."""

    gate: torch.Tensor  # (channels,) or (batch, channels)
    #: the batch's attention mask, for the activation score (None: every token counts)
    mask: torch.Tensor | None = None
    #: sum over examples, norms and tokens of |x| per channel (float64), with ``record_activation``
    activation: torch.Tensor | None = None
    _handles: list = field(default_factory=list, repr=False)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _shaped(gate: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``gate`` broadcastable over ``x`` (``(batch, ..., channels)``, or one row for all: ``(1, ...)``)."""
    gate = gate.to(x.dtype)
    if gate.dim() == 1:
        return gate
    if x.shape[0] not in (1, gate.shape[0]):
        raise ValueError(f"a per-example channel gate of {gate.shape[0]} examples met a tensor of shape "
                         f"{tuple(x.shape)}; list its module in the adapter's shared_hidden_modules")
    return gate.view(gate.shape[0], *([1] * (x.dim() - 2)), gate.shape[1])


def _kept_norm(module: nn.Module, kept: torch.Tensor) -> nn.Module:
    """A copy of the per-channel module ``module`` with only the channels ``kept``."""
    copied = copy.deepcopy(module)
    slice_channels(copied, ResidualParts(width=kept.numel(), channelwise=[copied]), kept.tolist())
    return copied


@contextlib.contextmanager
def channel_gates(model: nn.Module, adapter: ArchitectureAdapter, gate: torch.Tensor | None = None, *,
                  statistics: str = "all", record_activation: bool = False) -> Iterator[ChannelGates]:
    """Install channel gates (all ones unless given) for the ``with`` block. ``statistics="kept"``: every norm
    computes its statistics over the channels whose (0/1, whole-batch) gate is 1, as the sliced model does.

    Example:
        >>> with channel_gates(model, adapter, torch.tensor([1.0] * 24 + [0.0] * 8)) as gates:  # doctest: +SKIP
        ...     out = model(**batch)       # channels 24..31 zero throughout the residual stream
    """
    parts = parts_of(model, adapter)
    device = next(model.parameters()).device
    state = ChannelGates(gate=gate if gate is not None else torch.ones(parts.width, device=device))
    if record_activation:
        state.activation = torch.zeros(parts.width, dtype=torch.float64)
    shared = {id(m) for m in parts.shared}
    channelwise = {id(m) for m in parts.channelwise}
    encoder = {id(m) for m in model.base_model.modules()}
    kept_norms: dict[int, tuple[nn.Module, torch.Tensor]] = {}
    if statistics == "kept":
        if state.gate.dim() != 1 or not bool(((state.gate == 0) | (state.gate == 1)).all()):
            raise ValueError("statistics='kept' needs one 0/1 gate per channel for the whole batch")
        kept = state.gate.nonzero().flatten()
        kept_norms = {id(m): (_kept_norm(m, kept.cpu()), kept) for m in parts.channelwise}
    elif statistics != "all":
        raise ValueError(f"statistics={statistics!r}: expected 'all' or 'kept'")

    def produced(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        per_example = state.gate.dim() == 2
        if per_example and id(module) in shared:
            return output
        if id(module) in kept_norms:  # the norm over the kept channels only, zeros elsewhere
            norm, kept = kept_norms[id(module)]
            inner = norm(args[0].index_select(-1, kept.to(args[0].device)))
            output = torch.zeros_like(output).index_copy(-1, kept.to(output.device), inner)
        if (record_activation and per_example and id(module) in channelwise and id(module) in encoder
                and state.activation is not None):
            _record(state, output.detach())
        return output * _shaped(state.gate, output)

    def read(module: nn.Module, args: tuple) -> tuple:
        # a 0/1 mask for the whole batch also on what reads hidden width: what no producer hook reaches (DeBERTa-v2
        # reads its relative-position table as a weight) is cut too; on the rest it changes nothing (0·0, 1·1).
        # A gate of other values is left to the producers, so that its derivative is the per-example gates' one
        gate = state.gate
        if gate.dim() != 1 or not bool(((gate == 0) | (gate == 1)).all()):
            return args
        return (args[0] * gate.to(args[0].dtype), *args[1:])

    try:
        for module in parts.producers:
            state._handles.append(module.register_forward_hook(produced))
        for module in parts.readers:
            state._handles.append(module.register_forward_pre_hook(read))
        yield state
    finally:
        state.remove()


def _record(state: ChannelGates, x: torch.Tensor) -> None:
    """Add ``|x|`` summed over the batch's non-padding tokens to the activation score."""
    x = x.abs().double()
    mask = state.mask
    if x.dim() == 3 and mask is not None and mask.shape == x.shape[:2]:
        x = x * mask.to(x.device, x.dtype)[..., None]
    state.activation += x.reshape(-1, x.shape[-1]).sum(0).cpu()
