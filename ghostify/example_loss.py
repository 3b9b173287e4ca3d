"""The loss of each example of a sequence classifier or regressor: what importance differentiates
(``methods/pruning/importance.py``, whose default loss it is) and what the classification task kind
reports (``tasks/classification.py``). It sits below both, beside the method structure code, so
that neither reaches into the other.

Without labels it is the label-free objective: the cross-entropy against a label drawn from the
model's own predictive distribution (whose expected squared gate derivative is the Fisher
information), or for regression the prediction itself.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def per_example_loss(logits: torch.Tensor, labels: torch.Tensor | None, *, regression: bool, generator=None) -> torch.Tensor:
    """The loss of each example; with ``labels=None`` the label-free objective (see the module doc)."""
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
