"""Sentence-order prediction (ALBERT): two consecutive segments, in order or swapped.

A sentence pair (two text columns) gives its two texts; a single text with two or more sentences
is cut at the sentence boundary nearest its middle; anything else has no SOP example (label -100,
skipped by the loss). Which examples are swapped is drawn once from the seed, so a resumed run
sees the same negatives as an uninterrupted one.
"""

from __future__ import annotations

import random
import re
from typing import Any

from ..errors import DataError
from .loading import TaskData

PREFIX = "sop_"
IGNORE = -100
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def two_segments(texts: list[str]) -> tuple[str, str] | None:
    """The two segments of one example (its texts, one per text column), or None."""
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if len(texts) >= 2:
        return texts[0], texts[1]
    if not texts:
        return None
    text = texts[0].strip()
    cuts = [m.start() for m in _SENTENCE_END.finditer(text)]
    if not cuts:
        return None
    cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
    return text[:cut].strip(), text[cut:].strip()


def add_sop_inputs(rows, data: TaskData, tokenizer, *, max_length: int, seed: int):
    """``rows`` (the tokenised training rows, in ``data``'s order) with ``sop_input_ids``,
    ``sop_attention_mask`` (``sop_token_type_ids``) and ``sop_labels`` (0 in order, 1 swapped)."""
    rng = random.Random(seed)
    columns = data.task.text_columns
    firsts, seconds, labels = [], [], []
    for example in data.rows.select_columns(list(columns)):
        pair = two_segments([example[c] for c in columns])
        swap = rng.random() < 0.5  # drawn for every row, so the draws do not depend on which rows pair
        if pair is None:
            firsts.append(example[columns[0]] or "")
            seconds.append(None)
            labels.append(IGNORE)
            continue
        a, b = (pair[1], pair[0]) if swap else pair
        firsts.append(a)
        seconds.append(b)
        labels.append(int(swap))
    usable = sum(label != IGNORE for label in labels)
    if usable == 0:
        raise DataError(
            f"--sop-weight needs sentence pairs or texts of two or more sentences; none of the {len(labels)} "
            f"training examples of {data.dataset} ({', '.join(columns)}) has two segments: set --sop-weight 0"
        )
    encoded: dict[str, list[Any]] = {}
    for first, second in zip(firsts, seconds):
        one = tokenizer(first, second, truncation=True, max_length=max_length) if second is not None else \
            tokenizer(first, truncation=True, max_length=max_length)
        for key, value in one.items():
            encoded.setdefault(PREFIX + key, []).append(value)
    for key, values in encoded.items():
        rows = rows.add_column(key, values)
    return rows.add_column(PREFIX + "labels", labels)


def sop_collator(collate, tokenizer):
    """Wrap a padding collator: pad the ``sop_*`` features as a batch of their own."""
    import torch

    def collate_with_sop(features: list[dict[str, Any]]) -> dict[str, Any]:
        main = [{k: v for k, v in f.items() if not k.startswith(PREFIX)} for f in features]
        batch = dict(collate(main))
        sop = [{k[len(PREFIX):]: v for k, v in f.items() if k.startswith(PREFIX) and k != PREFIX + "labels"} for f in features]
        padded = tokenizer.pad(sop, return_tensors="pt")
        for key, value in padded.items():
            batch[PREFIX + key] = value
        batch[PREFIX + "labels"] = torch.tensor([f[PREFIX + "labels"] for f in features], dtype=torch.long)
        return batch

    return collate_with_sop
