"""Head and FFN-neuron importance by loss impact (Michel et al. 2019; DynaBERT).

The importance of a unit is E_x |dL(x)/dg|, the expected absolute derivative of the per-example
loss with respect to a multiplicative gate at 1 on that unit. Gates have one entry per example, so
one forward and one backward pass per batch give every example's own derivative: the score does
not depend on the batch size, and no per-head ablation loop is needed.

Without labels (``label_free``), the loss is the cross-entropy against a label drawn from the
model's own predictive distribution: the derivative of its expected KL to itself is zero, but the
expected squared derivative is the Fisher information, i.e. how much the gate moves the KL. For
regression the score is the output's own sensitivity |df(x)/dg|.

A layer's score (for ``drop-layers``) is the same derivative for a gate on the layer's whole
update, ``x + g·(layer(x) - x)``, computed in the same forward and backward pass.

The same pass gives the Fisher information of the gates (Kwon et al. 2022, "A Fast Post-Training
Pruning Framework for Transformers"): ``E[(dL/dg)²]`` per unit and per layer (the diagonal: removing a
set of units costs about half the sum of theirs, to second order) and, per layer, a factor ``R`` of the
block of the Fisher among that layer's heads (and among its neurons), ``Rᵀ R / n = E[∇g ∇gᵀ]``, which
``prune --rearrange`` minimises over (interactions between units of one layer). The per-example
gradients are that factor when there are fewer examples than units; otherwise their QR's ``R``
(square, the same block), so the file stays at most ``units²`` per layer.

Where the family's hidden size can be cut (``prune-hidden``), the same pass also scores each channel of the
residual stream: a gate per channel shared by every layer (``ghostify.methods.hidden``'s channel gates) gives
its E|dL/dg| (``hidden``) and E[(dL/dg)²] (``fisher.hidden``), and the channel's mean absolute value at the
output of every norm of the encoder gives Minitron's activation score (``activation.hidden``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from ...architectures import ArchitectureAdapter
from ...architectures.projections import ffn_input_weights, value_weight
from ...errors import CheckpointError
from ...example_loss import per_example_loss
from ..criteria import FISHER, LOSS_GRADIENT, WEIGHT_MAGNITUDE, criteria
from ..hidden import channel_gates, scorable  # the residual channels' gates: prune-hidden's structure code
# the scores file's format lives below the methods that read it; pruning's package still exports its names
from ..scores import SCORES_NAME, FisherScores, GateScores, ImportanceScores  # noqa: F401
from .gates import gated

#: ``loss(model, batch, generator)``: one loss per example of ``batch``
LossFunction = Callable[[nn.Module, dict, torch.Generator], torch.Tensor]


def compute_importance(
    model: nn.Module,
    adapter: ArchitectureAdapter,
    batches: Iterable[dict[str, torch.Tensor]],
    *,
    label_free: bool = False,
    seed: int = 0,
    progress=None,
    loss: LossFunction | None = None,
) -> ImportanceScores:
    """Mean over examples of |d loss / d gate| for every head and FFN neuron, and for every
    layer (a gate on its whole update: :func:`layer_gates`), and the Fisher information of the same
    gates (:class:`FisherScores`), from one forward and backward per batch; where the family's hidden
    size can be cut, the same for a gate per residual channel, and the channels' activation scores.

    ``batches`` yield model inputs with ``labels`` (unless ``label_free``). ``progress`` is called
    with each batch's size. ``loss(model, batch, generator)`` gives one loss per example (a task
    kind's, ``ghostify.tasks``); the default is a sequence classifier's
    (:func:`ghostify.example_loss.per_example_loss`).
    """
    model.eval()
    regression = getattr(model.config, "problem_type", None) == "regression" or model.config.num_labels == 1

    def classifier_loss(model: nn.Module, batch: dict[str, torch.Tensor], generator) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        labels = None if label_free else batch["labels"]
        return per_example_loss(model(**inputs).logits, labels, regression=regression, generator=generator)

    loss = loss or classifier_loss
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    count = 0
    channel_scoring = (channel_gates(model, adapter, record_activation=True) if scorable(model)
                       else contextlib.nullcontext())
    with gated(model, adapter) as gates, layer_gates(adapter.layers(model)) as per_layer, channel_scoring as channels:
        template_heads = [g.clone() for g in gates.heads]
        template_ffn = [g.clone() for g in gates.ffn]
        n_layers = len(template_heads)
        first = _Moments(n_layers, [g.numel() for g in template_heads], [g.numel() for g in template_ffn])
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            size = batch["input_ids"].shape[0]
            gates.heads = [g.expand(size, -1).clone().requires_grad_(True) for g in template_heads]
            gates.ffn = [g.expand(size, -1).clone().requires_grad_(True) for g in template_ffn]
            per_layer[:] = [torch.ones(size, device=device, requires_grad=True) for _ in range(n_layers)]
            wanted = [*gates.heads, *gates.ffn, *per_layer]
            if channels is not None:  # one gate per example and channel, shared by every layer
                channels.gate = torch.ones(size, adapter.hidden_size(model.config), device=device, requires_grad=True)
                channels.mask = batch.get("attention_mask")
                wanted.append(channels.gate)
            losses = loss(model, batch, generator)
            grads = torch.autograd.grad(losses.sum(), wanted)
            first.add([g.detach().float().cpu() for g in grads[:n_layers]],
                      [g.detach().float().cpu() for g in grads[n_layers:2 * n_layers]],
                      torch.stack([g.detach().float().cpu() for g in grads[2 * n_layers:3 * n_layers]], 1))
            if channels is not None:
                first.add_hidden(grads[3 * n_layers].detach().float().cpu())
            count += size
            if progress is not None:
                progress(size)
    if count == 0:
        raise CheckpointError("no samples to score; raise --samples")
    scores = first.scores(label_free)
    if channels is not None and channels.activation is not None:
        scores.hidden_activation = (channels.activation / count).float()
    return scores


class _Moments:
    """What :func:`compute_importance` sums over the examples' gate gradients: for every criterion that is a
    statistic of them (``Criterion.accumulate``: |dL/dg|, (dL/dg)², ... in float64, so that the order of batches
    barely matters) its per-unit sums, and every example's gradients of each layer's head and neuron gates (the rows
    the Fisher block factors are made of)."""

    def __init__(self, layers: int, heads: list[int], ffn: list[int]) -> None:
        self.statistics = [c for c in criteria() if c.accumulate is not None]
        self.sums = {c.name: GateScores(heads=[torch.zeros(n, dtype=torch.float64) for n in heads],
                                        ffn=[torch.zeros(n, dtype=torch.float64) for n in ffn],
                                        layers=torch.zeros(layers, dtype=torch.float64))
                     for c in self.statistics}
        self.rows_heads = [_Rows(n) for n in heads]
        self.rows_ffn = [_Rows(n) for n in ffn]
        self.count = 0

    def add_hidden(self, grads: torch.Tensor) -> None:
        """One batch's (batch, channels) gradients of the channel gates."""
        for c in self.statistics:
            sums = self.sums[c.name]
            if sums.hidden is None:
                sums.hidden = torch.zeros(grads.shape[1], dtype=torch.float64)
            sums.hidden += c.accumulate(grads)

    def add(self, heads: list[torch.Tensor], ffn: list[torch.Tensor], layers: torch.Tensor) -> None:
        """One batch: ``heads[l]`` / ``ffn[l]`` are (batch, units) gradients, ``layers`` (batch, layers)."""
        for c in self.statistics:
            sums = self.sums[c.name]
            for l, (h, f) in enumerate(zip(heads, ffn)):
                sums.heads[l] += c.accumulate(h)
                sums.ffn[l] += c.accumulate(f)
            sums.layers += c.accumulate(layers)
        for l, (h, f) in enumerate(zip(heads, ffn)):
            self.rows_heads[l].add(h)
            self.rows_ffn[l].add(f)
        self.count += layers.shape[0]

    def means(self, name: str) -> GateScores:
        """The scores of criterion ``name``: its sums over the examples / their count."""
        sums = self.sums[name]
        return GateScores(heads=[(s / self.count).float() for s in sums.heads],
                          ffn=[(s / self.count).float() for s in sums.ffn], layers=(sums.layers / self.count).float(),
                          hidden=(sums.hidden / self.count).float() if sums.hidden is not None else None)

    def scores(self, label_free: bool) -> ImportanceScores:
        # the first-order and the Fisher scores have their own places in the file (written before the registry)
        first, second = self.means(LOSS_GRADIENT), self.means(FISHER)
        fisher = FisherScores(heads=second.heads, ffn=second.ffn, layers=second.layers,
                              head_factors=[block_factor(rows.all()) for rows in self.rows_heads],
                              ffn_factors=[block_factor(rows.all()) for rows in self.rows_ffn], samples=self.count,
                              hidden=second.hidden)
        more = {c.name: self.means(c.name) for c in self.statistics if c.name not in (LOSS_GRADIENT, FISHER)}
        return ImportanceScores(heads=first.heads, ffn=first.ffn,
                                metadata={"samples": self.count, "label_free": label_free, "criterion": LOSS_GRADIENT},
                                layers=first.layers, fisher=fisher, hidden=first.hidden, more=more)


class _Rows:
    """The Gram matrix ``Σ rowsᵀ rows`` of one layer's per-example gate gradients, kept as a factor: the rows
    themselves in one buffer (doubling when full: a few large allocations rather than one per batch between the
    batches' activations, which fragments the heap: measured 300 MB more peak memory at 1,024 MiniLM examples
    with a list of per-batch tensors), folded into their square QR factor whenever the buffer would pass twice
    the layer's units. Memory stays under ``2 · units²`` numbers however many examples are scored; the QR of a
    ``2·units x units`` block runs once per ``units`` examples."""

    def __init__(self, units: int) -> None:
        self.buffer = torch.empty(0, units)
        self.count = 0
        self.cap = max(2 * units, 256)

    def add(self, rows: torch.Tensor) -> None:
        end = self.count + rows.shape[0]
        if end > self.cap and self.count > self.buffer.shape[1]:  # fold what is there: RᵀR = its Gram matrix
            folded = block_factor(self.buffer[: self.count])
            self.count = folded.shape[0]
            self.buffer[: self.count] = folded
            end = self.count + rows.shape[0]
        if end > self.buffer.shape[0]:
            grown = torch.empty(max(end, min(2 * self.buffer.shape[0], self.cap), 256), self.buffer.shape[1])
            grown[: self.count] = self.buffer[: self.count]
            self.buffer = grown
        self.buffer[self.count:end] = rows
        self.count = end

    def all(self) -> torch.Tensor:
        return self.buffer[: self.count]


def block_factor(rows: torch.Tensor) -> torch.Tensor:
    """A factor ``R`` of ``rows.T @ rows`` with at most as many rows as columns: ``rows`` themselves when there
    are no more of them than columns, else the ``R`` of their QR decomposition (square, ``RᵀR = rowsᵀ rows``)."""
    if rows.shape[0] <= rows.shape[1]:
        return rows.float().contiguous()
    return torch.linalg.qr(rows.float(), mode="r").R.contiguous()


@contextlib.contextmanager
def layer_gates(layers: list[nn.Module]) -> Iterator[list[torch.Tensor]]:
    """A gate on each layer's whole update, one per example: the layer's output ``y`` of input
    ``x`` becomes ``y + (g - 1)·(y - x)``, which is ``x + g·(y - x)`` and, at ``g = 1``, exactly
    ``y`` (the head and neuron scores do not change). Fill the yielded list with one ``(batch,)``
    tensor per layer before each forward pass."""
    gates: list[torch.Tensor] = []

    def hook(i: int):
        def gate(module: nn.Module, args: tuple, output: Any) -> Any:
            out = output[0] if isinstance(output, tuple) else output
            g = gates[i].to(out.dtype).view(-1, *([1] * (out.dim() - 1)))
            mixed = out + (g - 1) * (out - args[0])
            return (mixed, *output[1:]) if isinstance(output, tuple) else mixed

        return gate

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    try:
        yield gates
    finally:
        for handle in handles:
            handle.remove()


def magnitude_importance(model: nn.Module, adapter: ArchitectureAdapter) -> ImportanceScores:
    """Data-free fallback: a unit's weight magnitude along its path through the layer.

    An attention unit scores ||W_V[unit]||_F * ||W_O[:, unit]||_F (its value-output path), a neuron
    the product of the norms of its input rows (up, and gate where gated) and ||W_2[:, neuron]||."""
    config = model.config
    head_size, unit_width = adapter.head_size(config), adapter.unit_width(config)
    heads, ffn = [], []
    for layer in adapter.layers(model):
        p = adapter.paths_for_layer(layer)
        value = value_weight(adapter, layer, config).detach().float()
        out = adapter.submodule(layer, p.attention_output).weight.detach().float()
        v = value.view(-1, head_size, value.shape[1]).flatten(1).norm(dim=1)
        o = out.view(out.shape[0], -1, unit_width).transpose(0, 1).flatten(1).norm(dim=1)
        heads.append((v * o).cpu())
        score = adapter.submodule(layer, p.ffn_down).weight.detach().float().norm(dim=0)
        for weight in ffn_input_weights(adapter, layer):
            score = score * weight.detach().float().norm(dim=1)
        ffn.append(score.cpu())
    return ImportanceScores(heads=heads, ffn=ffn, metadata={"criterion": WEIGHT_MAGNITUDE})
