"""Masked copies of the training text, for distillation only (``distill --masked-copies``).

Distillation reads the teacher's outputs, not the labels, so any text the teacher can read teaches the student.
A copy of a text with some of its words replaced by the tokenizer's mask token is a new input near the
original: the teacher's outputs on it show the student how the teacher behaves around the training texts, not
only on them. Without a masked LM this is the cheapest augmentation there is (MATE-KD and TinyBERT replace the
words by an MLM's guesses instead; ``ghostify augment`` does that where a user has an MLM).

Measured: a 3x SQuAD-part student (5 layers of 1–2 heads) distilled for the same 600 steps from the same
teacher reached F1 42.3 with one masked copy of every context, against 39.6 on the training text alone
(``benchmarks/results/budget_curve_xeon.md``): on 4,196 questions its training loss kept falling while its
validation F1 stopped — it learned those inputs, not the teacher.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import GhostifyError
from .sampling import example_rng

#: the share of words masked in a copy: BERT's masked-LM rate, the share its pre-training taught the model to read
#: around
MASKED_SHARE = 0.15

#: what counts as a word of a text column: a run of letters and digits (punctuation and spaces are kept)
_WORD = re.compile(r"\w+")


def check_copies(copies: object) -> None:
    """Refuse a count of masked copies that is not a whole number of at least 0."""
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 0:
        raise GhostifyError(f"--masked-copies {copies!r} must be a whole number of 0 or more (the masked copies of "
                            "every training text distillation reads besides it; 0: none)")


def mask_words(text: str, mask_token: str, rng: Any, share: float = MASKED_SHARE) -> str:
    """``text`` with each word replaced by ``mask_token`` with probability ``share`` (``rng``: a random.Random)."""
    return _WORD.sub(lambda word: mask_token if rng.random() < share else word.group(), text)


def mask_value(value: Any, mask_token: str, rng: Any, share: float = MASKED_SHARE) -> Any:
    """One column's value masked: a text's words, or each word of a list of words (token classification)."""
    if isinstance(value, str):
        return mask_words(value, mask_token, rng, share)
    return [mask_token if rng.random() < share else word for word in value]


def masked_copies(rows: Any, columns: list[str], mask_token: str, copies: int, seed: int) -> Any:
    """``copies`` masked copies of every row of ``rows`` (a datasets.Dataset; only ``columns`` kept), one after the
    other. Row ``i`` of copy ``c`` draws from its own seeded stream, so a copy does not depend on batching or on
    the other rows."""
    import datasets

    plain = rows.select_columns(columns)
    out: dict[str, list[Any]] = {column: [] for column in columns}
    for copy in range(copies):
        for index, row in enumerate(plain):
            rng = example_rng(seed, copy * len(plain) + index)
            for column in columns:
                out[column].append(mask_value(row[column], mask_token, rng))
    return datasets.Dataset.from_dict(out, features=plain.features)
