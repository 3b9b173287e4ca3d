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
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from ...architectures import ArchitectureAdapter
from ...architectures.projections import ffn_input_weights, value_weight
from ...errors import CheckpointError
from ...example_loss import per_example_loss
from .gates import gated
from ..hidden import ACTIVATION  # the channel scores' third criterion (Minitron's), declared with prune-hidden
from .settings import FISHER, LOSS_GRADIENT, WEIGHT_MAGNITUDE

SCORES_NAME = "importance.safetensors"

#: ``loss(model, batch, generator)``: one loss per example of ``batch``
LossFunction = Callable[[nn.Module, dict, torch.Generator], torch.Tensor]


@dataclass
class FisherScores:
    """The Fisher information of the gates, per distinct layer: ``E[(dL/dg)²]`` of every head, neuron and
    layer gate, and a factor of the layer's block among its heads and among its neurons
    (``factor.T @ factor / samples`` is ``E[∇g ∇gᵀ]`` over that layer's units)."""

    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    layers: torch.Tensor
    head_factors: list[torch.Tensor]
    ffn_factors: list[torch.Tensor]
    samples: int
    #: E[(dL/dg)²] of a gate per residual channel shared by every layer (None: not scored, see ImportanceScores.hidden)
    hidden: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {f"fisher.heads.{i}": t for i, t in enumerate(self.heads)}
        out |= {f"fisher.ffn.{i}": t for i, t in enumerate(self.ffn)}
        out |= {f"fisher.factor.heads.{i}": t for i, t in enumerate(self.head_factors)}
        out |= {f"fisher.factor.ffn.{i}": t for i, t in enumerate(self.ffn_factors)}
        out["fisher.layers"] = self.layers
        if self.hidden is not None:
            out["fisher.hidden"] = self.hidden
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], layers: int, samples: Any, where: Path) -> FisherScores | None:
        """The Fisher scores in a scores file's ``tensors`` (None in a file without them: weight magnitude, or
        written by an older ghostify), each shape checked against the first-order scores beside them."""
        if "fisher.layers" not in tensors:
            return None
        try:
            fisher = cls(heads=[tensors[f"fisher.heads.{i}"] for i in range(layers)],
                         ffn=[tensors[f"fisher.ffn.{i}"] for i in range(layers)], layers=tensors["fisher.layers"],
                         head_factors=[tensors[f"fisher.factor.heads.{i}"] for i in range(layers)],
                         ffn_factors=[tensors[f"fisher.factor.ffn.{i}"] for i in range(layers)], samples=int(samples),
                         hidden=tensors.get("fisher.hidden"))
        except KeyError as exc:
            raise CheckpointError(f"corrupt importance file {where}: missing {exc}; re-run `ghostify importance`") from None
        except (TypeError, ValueError):
            raise CheckpointError(f"corrupt importance file {where}: its Fisher sample count {samples!r} is not a "
                                  "number; re-run `ghostify importance`") from None
        for i in range(layers):
            for kind, diagonal, factor, first in (("heads", fisher.heads[i], fisher.head_factors[i], tensors[f"heads.{i}"]),
                                                  ("ffn", fisher.ffn[i], fisher.ffn_factors[i], tensors[f"ffn.{i}"])):
                units = first.numel()
                if diagonal.numel() != units or factor.dim() != 2 or factor.shape[1] != units:
                    raise CheckpointError(f"corrupt importance file {where}: the Fisher scores of layer {i}'s {kind} "
                                          f"do not match its {units} units; re-run `ghostify importance`")
        hidden = tensors.get("hidden")
        if fisher.hidden is not None and (hidden is None or fisher.hidden.numel() != hidden.numel()):
            raise CheckpointError(f"corrupt importance file {where}: its Fisher channel scores do not match its "
                                  "first-order ones; re-run `ghostify importance`")
        if fisher.layers.numel() != layers or fisher.samples < 1:
            raise CheckpointError(f"corrupt importance file {where}: Fisher scores of {fisher.layers.numel()} layers "
                                  f"(of {layers}) from {fisher.samples} examples; re-run `ghostify importance`")
        return fisher


@dataclass
class ImportanceScores:
    """Per distinct layer: one score per head and per FFN neuron, as the model is now."""

    #: the first-order scores E|dL/dg| (``loss-gradient``), or weight magnitude (``metadata["criterion"]``)
    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    metadata: dict[str, Any] = field(default_factory=dict)
    #: one score per distinct layer (a gate on its whole update), for ``drop-layers``; None in
    #: scores without them (weight magnitude, files of an older ghostify)
    layers: torch.Tensor | None = None
    #: the Fisher information of the same gates (None in scores without it: weight magnitude, older files)
    fisher: FisherScores | None = None
    #: one score per residual channel (E|dL/dg| of a gate per channel shared by every layer), for ``prune-hidden``;
    #: and Minitron's activation score of each channel (mean |x| at every norm's output, summed over the norms).
    #: None where the family's hidden size cannot be cut, or in files of an older ghostify
    hidden: torch.Tensor | None = None
    hidden_activation: torch.Tensor | None = None

    @property
    def criterion(self) -> str:
        """What :attr:`heads`, :attr:`ffn` and :attr:`layers` are."""
        return str(self.metadata.get("criterion", LOSS_GRADIENT))

    def criteria(self) -> tuple[str, ...]:
        """The criteria these scores can rank by."""
        return (self.criterion, FISHER) if self.fisher is not None else (self.criterion,)

    def ranked_by(self, criterion: str) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None, str]:
        """The head, neuron and layer scores of ``criterion`` (``fisher`` or ``loss-gradient``) and the
        criterion they are: scores without Fisher information give their own (the caller says so)."""
        if criterion == FISHER and self.fisher is not None:
            return self.fisher.heads, self.fisher.ffn, self.fisher.layers, FISHER
        return self.heads, self.ffn, self.layers, self.criterion

    def hidden_criteria(self) -> tuple[str, ...]:
        """The criteria the channel scores can rank by (none without channel scores)."""
        have = ((FISHER, self.fisher is not None and self.fisher.hidden is not None),
                (LOSS_GRADIENT, self.hidden is not None), (ACTIVATION, self.hidden_activation is not None))
        return tuple(name for name, present in have if present)

    def hidden_ranked_by(self, criterion: str) -> tuple[torch.Tensor | None, str]:
        """The channel scores of ``criterion`` (``fisher``, ``loss-gradient`` or ``activation``) and the criterion
        they are: scores without that one give the first of theirs (the caller says so); None without any."""
        by = {FISHER: self.fisher.hidden if self.fisher is not None else None, LOSS_GRADIENT: self.hidden,
              ACTIVATION: self.hidden_activation}
        if by.get(criterion) is not None:
            return by[criterion], criterion
        present = self.hidden_criteria()
        return (by[present[0]], present[0]) if present else (None, criterion)

    def save(self, path: str | Path) -> None:
        tensors = {f"heads.{i}": t for i, t in enumerate(self.heads)}
        tensors.update({f"ffn.{i}": t for i, t in enumerate(self.ffn)})
        if self.layers is not None:
            tensors["layers"] = self.layers
        if self.hidden is not None:
            tensors["hidden"] = self.hidden
        if self.hidden_activation is not None:
            tensors["activation.hidden"] = self.hidden_activation
        metadata = dict(self.metadata)
        if self.fisher is not None:
            tensors.update(self.fisher.tensors())
            metadata["fisher_samples"] = self.fisher.samples
        metadata["criteria"] = list(self.criteria())
        if self.hidden_criteria():
            metadata["hidden_criteria"] = list(self.hidden_criteria())
        tensors = {k: t.float().contiguous() for k, t in tensors.items()}
        safetensors.torch.save_file(tensors, str(path), metadata={"ghostify": json.dumps(metadata)})

    @classmethod
    def load(cls, path: str | Path) -> "ImportanceScores":
        path = Path(path)
        if path.is_dir():
            path = path / SCORES_NAME
        if not path.is_file():
            raise CheckpointError(f"no importance scores at {path}; run `ghostify importance` first")
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
                tensors = {k: f.get_tensor(k) for k in keys}
                metadata = json.loads((f.metadata() or {}).get("ghostify", "{}"))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"corrupt importance file {path}: {exc}; re-run `ghostify importance`") from exc
        if not isinstance(metadata, dict):
            raise CheckpointError(f"corrupt importance file {path}: its metadata is not a mapping; re-run "
                                  "`ghostify importance`")
        n = sum(1 for k in keys if k.startswith("heads."))
        try:
            heads = [tensors[f"heads.{i}"] for i in range(n)]
            ffn = [tensors[f"ffn.{i}"] for i in range(n)]
        except KeyError as exc:
            raise CheckpointError(f"corrupt importance file {path}: missing {exc}; re-run `ghostify importance`") from exc
        fisher = FisherScores.from_tensors(tensors, n, metadata.pop("fisher_samples", 0), path)
        metadata.pop("criteria", None)  # derived from what the file holds
        metadata.pop("hidden_criteria", None)
        hidden, activation = tensors.get("hidden"), tensors.get("activation.hidden")
        if activation is not None and hidden is not None and activation.numel() != hidden.numel():
            raise CheckpointError(f"corrupt importance file {path}: its activation channel scores do not match its "
                                  "gradient ones; re-run `ghostify importance`")
        return cls(heads=heads, ffn=ffn, metadata=metadata, layers=tensors.get("layers"), fisher=fisher, hidden=hidden,
                   hidden_activation=activation)


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
    from ..hidden import channel_gates, scorable  # the residual channels' gates: prune-hidden's structure code

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
    """What :func:`compute_importance` sums over the examples' gate gradients: their absolute values and
    squares (in float64, so that the order of batches barely matters), and every example's gradients of
    each layer's head and neuron gates (the rows the block factors are made of)."""

    def __init__(self, layers: int, heads: list[int], ffn: list[int]) -> None:
        self.abs_heads = [torch.zeros(n, dtype=torch.float64) for n in heads]
        self.abs_ffn = [torch.zeros(n, dtype=torch.float64) for n in ffn]
        self.sq_heads = [torch.zeros(n, dtype=torch.float64) for n in heads]
        self.sq_ffn = [torch.zeros(n, dtype=torch.float64) for n in ffn]
        self.abs_layers = torch.zeros(layers, dtype=torch.float64)
        self.sq_layers = torch.zeros(layers, dtype=torch.float64)
        self.rows_heads = [_Rows(n) for n in heads]
        self.rows_ffn = [_Rows(n) for n in ffn]
        self.count = 0
        #: the residual channels' gates: sums of |dL/dg| and (dL/dg)² (None: not scored)
        self.abs_hidden: torch.Tensor | None = None
        self.sq_hidden: torch.Tensor | None = None

    def add_hidden(self, grads: torch.Tensor) -> None:
        """One batch's (batch, channels) gradients of the channel gates."""
        if self.abs_hidden is None or self.sq_hidden is None:
            self.abs_hidden = torch.zeros(grads.shape[1], dtype=torch.float64)
            self.sq_hidden = torch.zeros(grads.shape[1], dtype=torch.float64)
        self.abs_hidden += grads.abs().sum(0).double()
        self.sq_hidden += grads.double().pow(2).sum(0)

    def add(self, heads: list[torch.Tensor], ffn: list[torch.Tensor], layers: torch.Tensor) -> None:
        """One batch: ``heads[l]`` / ``ffn[l]`` are (batch, units) gradients, ``layers`` (batch, layers)."""
        for l, (h, f) in enumerate(zip(heads, ffn)):
            self.abs_heads[l] += h.abs().sum(0).double()
            self.abs_ffn[l] += f.abs().sum(0).double()
            self.sq_heads[l] += h.double().pow(2).sum(0)
            self.sq_ffn[l] += f.double().pow(2).sum(0)
            self.rows_heads[l].add(h)
            self.rows_ffn[l].add(f)
        self.abs_layers += layers.abs().sum(0).double()
        self.sq_layers += layers.double().pow(2).sum(0)
        self.count += layers.shape[0]

    def scores(self, label_free: bool) -> ImportanceScores:
        n = self.count

        def mean(sums: list[torch.Tensor]) -> list[torch.Tensor]:
            return [(s / n).float() for s in sums]

        fisher = FisherScores(heads=mean(self.sq_heads), ffn=mean(self.sq_ffn), layers=(self.sq_layers / n).float(),
                              head_factors=[block_factor(rows.all()) for rows in self.rows_heads],
                              ffn_factors=[block_factor(rows.all()) for rows in self.rows_ffn], samples=n,
                              hidden=(self.sq_hidden / n).float() if self.sq_hidden is not None else None)
        return ImportanceScores(heads=mean(self.abs_heads), ffn=mean(self.abs_ffn),
                                metadata={"samples": n, "label_free": label_free, "criterion": LOSS_GRADIENT},
                                layers=(self.abs_layers / n).float(), fisher=fisher,
                                hidden=(self.abs_hidden / n).float() if self.abs_hidden is not None else None)


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
