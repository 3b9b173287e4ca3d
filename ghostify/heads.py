"""Which task head a checkpoint was saved with, read from its config's ``architectures``."""

from __future__ import annotations

SEQUENCE_CLASSIFICATION = "ForSequenceClassification"
MASKED_LM = "ForMaskedLM"


def architectures(config) -> list[str]:
    return list(getattr(config, "architectures", None) or [])


def has_head(config, suffix: str) -> bool:
    """Whether ``config`` names an architecture with this head (``ForMaskedLM``, ...)."""
    return any(name.endswith(suffix) for name in architectures(config))


def classifier_labels(config) -> int | None:
    """The number of labels of the sequence-classification head ``config`` was saved with (1 for a
    regression), or None when it has none (loading it with one would draw a fresh head)."""
    return config.num_labels if has_head(config, SEQUENCE_CLASSIFICATION) else None
