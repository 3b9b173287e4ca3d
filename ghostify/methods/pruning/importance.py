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

SCORES_NAME = "importance.safetensors"

#: ``loss(model, batch, generator)``: one loss per example of ``batch``
LossFunction = Callable[[nn.Module, dict, torch.Generator], torch.Tensor]


@dataclass
class ImportanceScores:
    """Per distinct layer: one score per head and per FFN neuron, as the model is now."""

    heads: list[torch.Tensor]
    ffn: list[torch.Tensor]
    metadata: dict[str, Any] = field(default_factory=dict)
    #: one score per distinct layer (a gate on its whole update), for ``drop-layers``; None in
    #: scores without them (weight magnitude, files of an older ghostify)
    layers: torch.Tensor | None = None

    def save(self, path: str | Path) -> None:
        tensors = {f"heads.{i}": t.float().contiguous() for i, t in enumerate(self.heads)}
        tensors.update({f"ffn.{i}": t.float().contiguous() for i, t in enumerate(self.ffn)})
        if self.layers is not None:
            tensors["layers"] = self.layers.float().contiguous()
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
                layers=tensors.get("layers"),
            )
        except KeyError as exc:
            raise CheckpointError(f"corrupt importance file {path}: missing {exc}; re-run `ghostify importance`") from exc


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
    layer (a gate on its whole update: :func:`layer_gates`), from one forward and backward per batch.

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
    head_sum: list[torch.Tensor] | None = None
    ffn_sum: list[torch.Tensor] | None = None
    count = 0
    with gated(model, adapter) as gates, layer_gates(adapter.layers(model)) as per_layer:
        template_heads = [g.clone() for g in gates.heads]
        template_ffn = [g.clone() for g in gates.ffn]
        head_sum = [torch.zeros_like(g, dtype=torch.float64) for g in template_heads]
        ffn_sum = [torch.zeros_like(g, dtype=torch.float64) for g in template_ffn]
        n_layers = len(template_heads)
        layer_sum = torch.zeros(n_layers, dtype=torch.float64)
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            size = batch["input_ids"].shape[0]
            gates.heads = [g.expand(size, -1).clone().requires_grad_(True) for g in template_heads]
            gates.ffn = [g.expand(size, -1).clone().requires_grad_(True) for g in template_ffn]
            per_layer[:] = [torch.ones(size, device=device, requires_grad=True) for _ in range(n_layers)]
            losses = loss(model, batch, generator)
            grads = torch.autograd.grad(losses.sum(), [*gates.heads, *gates.ffn, *per_layer])
            for i in range(n_layers):
                head_sum[i] += grads[i].detach().abs().sum(0).double()
                ffn_sum[i] += grads[n_layers + i].detach().abs().sum(0).double()
                layer_sum[i] += grads[2 * n_layers + i].detach().abs().sum().double().cpu()
            count += size
            if progress is not None:
                progress(size)
    if count == 0:
        raise CheckpointError("no samples to score; raise --samples")
    return ImportanceScores(
        heads=[(s / count).float().cpu() for s in head_sum],
        ffn=[(s / count).float().cpu() for s in ffn_sum],
        metadata={"samples": count, "label_free": label_free},
        layers=(layer_sum / count).float(),
    )


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
    return ImportanceScores(heads=heads, ffn=ffn, metadata={"criterion": "weight-magnitude"})
