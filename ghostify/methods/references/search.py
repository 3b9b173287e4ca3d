"""Exact top-1 cosine search in chunks, and the closed-form ridge map used for cheap retrieval.

The search is brute force (exact, memory bounded by ``chunk`` x entries); an approximate index
(IVF, HNSW) would scale further but is not needed for the reference sets of GLUE-sized tasks."""

from __future__ import annotations

import torch
from torch.nn import functional as F

CHUNK = 4096


def nearest(queries: torch.Tensor, keys: torch.Tensor, *, exclude_self: bool = False, chunk: int = CHUNK) -> torch.Tensor:
    """Index of the key most cosine-similar to each query. ``exclude_self``: queries are the keys
    themselves (same order) and an entry may not pick itself."""
    q = F.normalize(queries.float(), dim=-1)
    k = F.normalize(keys.float(), dim=-1)
    out = torch.empty(len(q), dtype=torch.long, device=q.device)
    for start in range(0, len(q), chunk):
        scores = q[start:start + chunk] @ k.T
        if exclude_self:
            rows = torch.arange(len(scores), device=q.device)
            scores[rows, rows + start] = float("-inf")
        out[start:start + chunk] = scores.argmax(-1)
    return out


def ridge_fit(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """``W`` of shape ``[d_x + 1, d_y]`` (last row: bias) minimising ``|[x, 1] W - y|² + λ|W|²``
    with ``λ = alpha · trace(xᵀx) / d_x`` on centred data (the bias is not penalised)."""
    x, y = x.double(), y.double()
    mx, my = x.mean(0), y.mean(0)
    xc, yc = x - mx, y - my
    gram = xc.T @ xc
    lam = alpha * float(gram.diagonal().sum()) / x.size(1)
    w = torch.linalg.solve(gram + lam * torch.eye(x.size(1), dtype=x.dtype, device=x.device), xc.T @ yc)
    bias = my - mx @ w
    return torch.cat([w, bias[None]], 0).float()


def apply_ridge(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x.float() @ weights[:-1] + weights[-1]


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens (``mask`` true) of ``[B, L, D]`` hidden states, in float32."""
    m = mask.to(torch.float32).unsqueeze(-1)
    return (hidden.float() * m).sum(1) / m.sum(1).clamp(min=1.0)
