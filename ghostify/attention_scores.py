"""Pre-softmax attention scores, handed from attention functions to layer-wise distillation.

An attention function calls :func:`record_scores`; ``training.capture`` sets :data:`score_sink`
to a list while a distillation step wants the scores (None otherwise, so recording is a no-op).
This sits below both, so that method code (reference attention) records scores without
importing the training package.
"""

from __future__ import annotations

import contextvars

import torch

score_sink: contextvars.ContextVar[list | None] = contextvars.ContextVar("ghostify_score_sink", default=None)


def record_scores(scores: torch.Tensor) -> None:
    """Record pre-softmax scores ``[B, H, Lq, L]`` while scores are being captured."""
    sink = score_sink.get()
    if sink is not None:
        sink.append(scores)
