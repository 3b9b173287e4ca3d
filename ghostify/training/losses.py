"""Distillation and task losses (GhostBERT / TinyBERT)."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """-sum softmax(t/T) * log_softmax(s/T), averaged over examples (TinyBERT's prediction loss)."""
    targets = F.softmax(teacher_logits.float() / temperature, dim=-1)
    return -(targets * F.log_softmax(student_logits.float() / temperature, dim=-1)).sum(-1).mean()


def prediction_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float, regression: bool) -> torch.Tensor:
    """Soft cross-entropy for classification, MSE between predictions for regression."""
    if regression:
        return F.mse_loss(student_logits.float().squeeze(-1), teacher_logits.float().squeeze(-1))
    return soft_cross_entropy(student_logits, teacher_logits, temperature)


def task_loss(logits: torch.Tensor, labels: torch.Tensor, regression: bool) -> torch.Tensor:
    if regression:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())
    return F.cross_entropy(logits.float(), labels)


def masked_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the real (unpadded) tokens: ``mask`` is (batch, seq)."""
    weights = mask.to(student.dtype).unsqueeze(-1)
    squared = (student.float() - teacher.float()) ** 2 * weights
    return squared.sum() / (weights.sum() * student.shape[-1]).clamp_min(1)


def attention_score_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSE of pre-softmax attention scores (batch, heads, query, key) over real query/key pairs."""
    pair = (mask[:, :, None] & mask[:, None, :]).to(student.dtype)[:, None]  # (batch, 1, q, k)
    squared = (student.float() - teacher.float()) ** 2 * pair
    return squared.sum() / (pair.sum() * student.shape[1]).clamp_min(1)
