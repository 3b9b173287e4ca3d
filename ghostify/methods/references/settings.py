"""RefBERT references: settings, their validation and the record format (see :mod:`ghostify.methods.references`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import GhostifyError
from ..base import setting

REFERENCES_NAME = "references.safetensors"


RIDGE_ALPHA = 1e-2
#: ``distill --reference-delta``: RefBERT's δ, subtracted from the first layer's attention weights
DEFAULT_DELTA = 0.01


def check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise GhostifyError(f"--reference-delta {delta} must be in (0, 1) (RefBERT subtracts it from the "
                            f"first layer's attention weights); try {DEFAULT_DELTA}")


@dataclass(frozen=True)
class ReferenceSettings:
    """``distill --references``: whether the student gets reference attention, and its δ."""

    references: bool = setting(False, help="RefBERT: the student's first layer also attends to the teacher's "
                               "representations of a similar training example (stored in the output).")
    reference_delta: float = setting(DEFAULT_DELTA, help="RefBERT's δ, subtracted from the first layer's attention "
                                     "weights.")
