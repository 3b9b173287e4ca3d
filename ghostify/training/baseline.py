"""The score of a constant prediction on the validation labels: a trained model that does no better
learned nothing (a learning rate too small for the run's length, too few steps), and every stage
built on it is meaningless. The loop writes the comparison to ``training.json`` and warns."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .metrics import compute_metrics, main_metric

#: the metrics that are correlations: a constant has none (0), and noise is about 1/sqrt(n)
CORRELATIONS = ("matthews_correlation", "pearson", "spearman")


@dataclass(frozen=True)
class ConstantBaseline:
    """The best constant prediction's ``value`` of the metric ``metric`` over ``samples`` labels;
    ``what`` names the constant for messages."""

    metric: str
    value: float
    samples: int
    what: str

    @property
    def margin(self) -> float:
        """About one standard error of the metric at the baseline over this many samples: a best
        score within it of the baseline is no evidence of learning."""
        if self.metric in CORRELATIONS:
            return 1 / math.sqrt(self.samples)
        return math.sqrt(max(self.value * (1 - self.value), 0.0) / self.samples)

    def compare(self, best: float) -> dict[str, Any]:
        """The record ``training.json`` keeps under ``constant_baseline``."""
        return {"metric": self.metric, "value": self.value, "best": best,
                "beats": bool(best > self.value + self.margin), "margin": self.margin}


def constant_baseline(metric: str, labels: list | torch.Tensor, regression: bool) -> ConstantBaseline | None:
    """The best constant prediction of ``labels`` under ``metric`` (a ``compute_metrics`` name): the
    class that scores best (the majority class for accuracy; for F1, predicting the positive class),
    or for regression the mean (a correlation of 0). None without labels."""
    labels = torch.as_tensor(labels)
    name = main_metric(metric)
    if labels.numel() == 0:
        return None
    if regression:
        constant = torch.full_like(labels, float(labels.double().mean()), dtype=torch.float64)
        value = compute_metrics(metric, constant, labels.double())[name]
        return ConstantBaseline(name, value, labels.numel(), "always predicting the mean")
    labels = labels.long()
    scores = {int(c): compute_metrics(metric, torch.full_like(labels, int(c)), labels)[name]
              for c in torch.unique(labels)}
    label = max(scores, key=lambda c: (scores[c], -c))
    return ConstantBaseline(name, scores[label], labels.numel(), f"always predicting class {label}")


__all__ = ["ConstantBaseline", "constant_baseline"]
