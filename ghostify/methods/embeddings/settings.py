"""Factorised embeddings: settings, their validation and the record format (see :mod:`ghostify.methods.embeddings`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import GhostifyError
from ..base import setting

EMBEDDINGS_RECORD_FORMAT = 1


def check_rank(rank: int, width: int, vocab: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise GhostifyError(f"--rank {rank!r} must be a positive integer (e.g. 128, as in ALBERT)")
    if rank > min(width, vocab):
        raise GhostifyError(
            f"--rank {rank} exceeds the {vocab} x {width} embedding matrix's rank {min(width, vocab)}; "
            f"choose at most {min(width, vocab)} (ALBERT uses 128)"
        )


@dataclass(frozen=True)
class FactorizeSettings:
    """The inner size of ``factorize-embeddings``' factors."""

    rank: int = setting(show_default=False, help="Inner size E of the V x E and E x H factors (ALBERT: 128); at most "
                        "the embedding width.")
