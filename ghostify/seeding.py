"""One seed for everything a command draws: fresh task heads, distillation projections, ghost
kernels, reference maps, dropout and data order.

A command seeds first, before it loads or builds anything, so that two runs with the same inputs
and ``--seed`` on the same machine and thread count write bit-identical weights.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from .errors import GhostifyError

MAX_SEED = 2**32 - 1  # NumPy's limit, the narrowest of the generators seeded here


def check_seed(seed: int) -> int:
    if not 0 <= seed <= MAX_SEED:
        raise GhostifyError(f"--seed {seed} is out of range; choose an integer from 0 to {MAX_SEED}")
    return seed


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every device) with ``seed``.

    Example:
        >>> seed_everything(0); a = torch.rand(1); seed_everything(0); bool(torch.equal(a, torch.rand(1)))
        True
    """
    check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def generator(seed: int) -> torch.Generator:
    """A CPU generator of its own, for initial values that must not depend on what ran before."""
    return torch.Generator().manual_seed(check_seed(seed))
