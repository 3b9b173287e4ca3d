"""Parameter and FLOP counts, by the GhostBERT paper's convention.

FLOPs are measured, not modelled: one forward pass at batch 1 and sequence length 128 under
``torch.utils.flop_counter`` (a multiply-add counts 2). The embedding lookup is an index, not a
matmul, so it is excluded as in the paper; LayerNorm, softmax and activations are not counted.
Measuring the real forward pass means ghost modules, shared layers and every family's own extras
(DeBERTa's relative-position terms, say) are counted without per-family formulas.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .architectures import get_adapter, usable_positions
from .errors import GhostifyError


@dataclass
class ModelSize:
    params: int
    encoder_params: int  # the encoder layers, without embeddings and task heads
    embedding_params: int
    flops: int

    def as_dict(self) -> dict[str, int]:
        return {
            "params": self.params,
            "encoder_params": self.encoder_params,
            "embedding_params": self.embedding_params,
            "flops": self.flops,
        }


def count_params(modules: list[nn.Module] | nn.Module) -> int:
    """Distinct parameters (a tensor shared between modules counts once)."""
    if isinstance(modules, nn.Module):
        modules = [modules]
    seen: dict[int, int] = {}
    for module in modules:
        for p in module.parameters():
            seen[id(p)] = p.numel()
    return sum(seen.values())


@contextlib.contextmanager
def _eager_attention(model: nn.Module):
    """Count attention as its matmuls: the counter does not know every fused SDPA kernel."""
    before = getattr(model.config, "_attn_implementation", None)
    switch = before not in (None, "eager") and hasattr(model, "set_attn_implementation")
    if switch:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if switch:
            model.set_attn_implementation(before)


def count_flops(model: nn.Module, seq_len: int = 128, batch_size: int = 1) -> int:
    limit = usable_positions(model.config)
    if seq_len > limit:
        raise GhostifyError(f"--seq-len {seq_len} exceeds the {limit} tokens the model can read; choose a shorter one")
    device = next(model.parameters()).device
    vocab = int(getattr(model.config, "vocab_size", 1000))
    input_ids = torch.arange(seq_len, device=device).remainder(max(vocab - 1, 1)).add(1).expand(batch_size, -1)
    mask = torch.ones_like(input_ids)
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    try:
        # grad mode on: the counter's module tracker fails on no-grad leaf tensors (DeBERTa)
        with _eager_attention(model), counter:
            model(input_ids=input_ids, attention_mask=mask)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


def measure(model: nn.Module, seq_len: int = 128) -> ModelSize:
    adapter = get_adapter(model.config)
    return ModelSize(
        params=count_params(model),
        encoder_params=count_params(adapter.layers(model)),
        embedding_params=count_params(adapter.embedding_modules(model)),
        flops=count_flops(model, seq_len=seq_len),
    )
