"""Head and FFN-neuron importance by loss impact (Michel et al. 2019; DynaBERT).

The importance of a unit is E_x |dL(x)/dg|, the expected absolute derivative of the per-example
loss with respect to a multiplicative gate at 1 on that unit. Gates have one entry per example, so
one forward and one backward pass per batch give every example's own derivative: the score does
not depend on the batch size, and no per-head ablation loop is needed.

Without labels (``label_free``), the loss is the cross-entropy against a label drawn from the
model's own predictive distribution: the derivative of its expected KL to itself is zero, but the
expected squared derivative is the Fisher information, i.e. how much the gate moves the KL. For
regression the score is the output's own sensitivity |df(x)/dg|.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from torch.nn import functional as F

from ...architectures import ArchitectureAdapter
from ...architectures.projections import ffn_input_weights, value_weight
from ...errors import CheckpointError
from .gates import gated

SCORES_NAME = "importance.safetensors"

#: ``loss(model, batch, generator)``: one loss per example of ``batch``
LossFunction = Callable[[nn.Module, dict, torch.Generator], torch.Tensor]


@dataclass
class ImportanceScores:
    """Per distinct layer: one score per head and per FFN neuron, as the model is now."""

    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    metadata: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | Path) -> None:
        tensors = {f"heads.{i}": t.float().contiguous() for i, t in enumerate(self.heads)}
        tensors.update({f"ffn.{i}": t.float().contiguous() for i, t in enumerate(self.ffn)})
        safetensors.torch.save_file(tensors, str(path), metadata={"ghostify": json.dumps(self.metadata)})

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
        n = sum(1 for k in keys if k.startswith("heads."))
        try:
            return cls(
                heads=[tensors[f"heads.{i}"] for i in range(n)],
                ffn=[tensors[f"ffn.{i}"] for i in range(n)],
                metadata=metadata,
            )
        except KeyError as exc:
            raise CheckpointError(f"corrupt importance file {path}: missing {exc}; re-run `ghostify importance`") from exc


def per_example_loss(logits: torch.Tensor, labels: torch.Tensor | None, *, regression: bool, generator=None) -> torch.Tensor:
    """The loss of each example; with ``labels=None`` the label-free objective (see module doc)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # half-precision losses lose the small gate derivatives
    if regression:
        prediction = logits.squeeze(-1)
        if labels is None:
            return prediction
        return (prediction - labels.to(prediction.dtype)) ** 2
    if labels is None:
        probs = logits.detach().softmax(-1)
        labels = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)
    return F.cross_entropy(logits, labels, reduction="none")


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
    """Mean over examples of |d loss / d gate| for every head and FFN neuron.

    ``batches`` yield model inputs with ``labels`` (unless ``label_free``). ``progress`` is called
    with each batch's size. ``loss(model, batch, generator)`` gives one loss per example (a task
    kind's, ``ghostify.tasks``); the default is a sequence classifier's (:func:`per_example_loss`).
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
    head_sum: list[torch.Tensor] | None = None
    ffn_sum: list[torch.Tensor] | None = None
    count = 0
    with gated(model, adapter) as gates:
        template_heads = [g.clone() for g in gates.heads]
        template_ffn = [g.clone() for g in gates.ffn]
        head_sum = [torch.zeros_like(g, dtype=torch.float64) for g in template_heads]
        ffn_sum = [torch.zeros_like(g, dtype=torch.float64) for g in template_ffn]
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            size = batch["input_ids"].shape[0]
            gates.heads = [g.expand(size, -1).clone().requires_grad_(True) for g in template_heads]
            gates.ffn = [g.expand(size, -1).clone().requires_grad_(True) for g in template_ffn]
            losses = loss(model, batch, generator)
            grads = torch.autograd.grad(losses.sum(), [*gates.heads, *gates.ffn])
            n_layers = len(template_heads)
            for i in range(n_layers):
                head_sum[i] += grads[i].detach().abs().sum(0).double()
                ffn_sum[i] += grads[n_layers + i].detach().abs().sum(0).double()
            count += size
            if progress is not None:
                progress(size)
    if count == 0:
        raise CheckpointError("no samples to score; raise --samples")
    return ImportanceScores(
        heads=[(s / count).float().cpu() for s in head_sum],
        ffn=[(s / count).float().cpu() for s in ffn_sum],
        metadata={"samples": count, "label_free": label_free},
    )


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
    return ImportanceScores(heads=heads, ffn=ffn, metadata={"criterion": "weight-magnitude"})
