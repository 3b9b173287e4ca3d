"""RefBERT references: settings, their validation and the record format (see :mod:`ghostify.methods.references`)."""

from __future__ import annotations

from ...errors import GhostifyError

REFERENCES_NAME = "references.safetensors"


RIDGE_ALPHA = 1e-2


def check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise GhostifyError(f"--reference-delta {delta} must be in (0, 1) (RefBERT subtracts it from the "
                            "first layer's attention weights); try 0.01")
