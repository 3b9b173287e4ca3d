"""Task metrics computed in-process (no metric downloads): accuracy, F1, Matthews, Pearson/Spearman."""

from __future__ import annotations

import math

import torch

#: the metric each preset reports, and which of its values selects the best checkpoint
METRICS = {
    "accuracy": ("accuracy",),
    "f1_accuracy": ("f1", "accuracy"),
    "matthews": ("matthews_correlation",),
    "pearson_spearman": ("pearson", "spearman"),
}


def main_metric(metric: str) -> str:
    return METRICS[metric][0]


def accuracy(pred: torch.Tensor, label: torch.Tensor) -> float:
    return float((pred == label).double().mean()) if label.numel() else float("nan")


def f1(pred: torch.Tensor, label: torch.Tensor, positive: int = 1) -> float:
    tp = int(((pred == positive) & (label == positive)).sum())
    fp = int(((pred == positive) & (label != positive)).sum())
    fn = int(((pred != positive) & (label == positive)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def matthews(pred: torch.Tensor, label: torch.Tensor) -> float:
    """Matthews correlation (binary or multi-class, Gorodkin's generalisation)."""
    classes = torch.unique(torch.cat([pred, label]))
    index = {int(c): i for i, c in enumerate(classes)}
    k = len(classes)
    confusion = torch.zeros(k, k, dtype=torch.float64)
    for p, t in zip(pred.tolist(), label.tolist()):
        confusion[index[t], index[p]] += 1
    t_sum = confusion.sum(1)
    p_sum = confusion.sum(0)
    n = confusion.sum()
    correct = confusion.trace()
    cov_ytyp = correct * n - (t_sum * p_sum).sum()
    cov_ypyp = n * n - (p_sum * p_sum).sum()
    cov_ytyt = n * n - (t_sum * t_sum).sum()
    denominator = math.sqrt(float(cov_ytyt * cov_ypyp))
    return float(cov_ytyp) / denominator if denominator else 0.0


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    x = x.double() - x.double().mean()
    y = y.double() - y.double().mean()
    denominator = float(x.norm() * y.norm())
    return float((x * y).sum()) / denominator if denominator else 0.0


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks with ties given their average rank (as scipy.stats.rankdata)."""
    x = x.double()
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    sorted_x = x[order]
    i = 0
    n = len(x)
    while i < n:
        j = i
        while j + 1 < n and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    return pearson(_ranks(x), _ranks(y))


def compute_metrics(metric: str, predictions: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``predictions``: class ids, or values for regression; ``labels`` likewise."""
    if metric == "accuracy":
        return {"accuracy": accuracy(predictions, labels)}
    if metric == "f1_accuracy":
        return {"f1": f1(predictions, labels), "accuracy": accuracy(predictions, labels)}
    if metric == "matthews":
        return {"matthews_correlation": matthews(predictions, labels)}
    if metric == "pearson_spearman":
        return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
    raise ValueError(f"unknown metric {metric!r}")
