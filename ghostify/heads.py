"""Which task head a checkpoint was saved with, read from its config's ``architectures``."""

from __future__ import annotations

SEQUENCE_CLASSIFICATION = "ForSequenceClassification"
MASKED_LM = "ForMaskedLM"
#: the architecture suffix of each task head, by its ghostify name (``checkpoint.HEAD_CLASSES``; "base": none)
SUFFIXES = {"sequence-classification": SEQUENCE_CLASSIFICATION, "token-classification": "ForTokenClassification",
            "question-answering": "ForQuestionAnswering", "masked-lm": MASKED_LM}


def architectures(config) -> list[str]:
    return list(getattr(config, "architectures", None) or [])


def has_head(config, suffix: str) -> bool:
    """Whether ``config`` names an architecture with this head (``ForMaskedLM``, ...)."""
    return any(name.endswith(suffix) for name in architectures(config))


def classifier_labels(config) -> int | None:
    """The number of labels of the sequence-classification head ``config`` was saved with (1 for a
    regression), or None when it has none (loading it with one would draw a fresh head)."""
    return config.num_labels if has_head(config, SEQUENCE_CLASSIFICATION) else None


def saved_head(config) -> str:
    """The head ``config`` was saved with, by its ghostify name (a ``checkpoint.HEAD_CLASSES`` key): "base" for a
    bare encoder (an architecture with no task head, or none named)."""
    return next((head for head, suffix in SUFFIXES.items() if has_head(config, suffix)), "base")


def head_phrase(head: str) -> str:
    """``head`` in a sentence: "a token-classification head", "no task head (a bare encoder)"."""
    return "no task head (a bare encoder)" if head == "base" else f"a {head} head"
