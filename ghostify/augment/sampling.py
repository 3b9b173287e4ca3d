"""The seeded random replacement of an example's words: a pure function of its slots and its own
random stream, so the output does not depend on batching or on other examples."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .words import Slot


def example_rng(seed: int, index: int) -> random.Random:
    """The random stream of one example: independent of batching, chunking and other examples.

    ``random.Random`` seeded with a string hashes it with SHA-512, the same on every platform and
    Python version."""
    return random.Random(f"ghostify-augment:{seed}:{index}")


def match_case(candidate: str, word: str) -> str:
    """Give a lower-case candidate the case pattern of the word it replaces (UPPER, Title)."""
    if not candidate.islower():
        return candidate  # a cased vocabulary's own casing ("Paris") is kept
    if len(word) > 1 and word.isupper():
        return candidate.upper()
    if word[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


def replace_words(text: str, slots: Sequence[Slot], choices: Sequence[str | None]) -> str:
    """``text`` with each slot's word replaced by its choice (``None``: kept), case matched."""
    parts = []
    last = 0
    for slot, choice in zip(slots, choices):
        if choice is None:
            continue
        parts.append(text[last : slot.start])
        parts.append(match_case(choice, slot.word))
        last = slot.end
    parts.append(text[last:])
    return "".join(parts)


def sample_variants(
    texts: Sequence[str],
    slots: Sequence[Sequence[Slot]],
    *,
    n: int,
    p: float,
    rng: random.Random,
) -> list[tuple[str, ...]]:
    """Up to ``n`` new versions of one example (a tuple of its texts, e.g. a sentence pair).

    Each of the ``n`` draws replaces every slot of every text independently with probability ``p``
    by a uniformly chosen candidate. As in TinyBERT, a draw identical to the original or to an
    earlier draw is dropped (it would only re-weight that example), so fewer than ``n`` may come
    back — always for an example without slots. The random stream is consumed the same way
    whether or not a draw is kept.
    """
    seen = {tuple(texts)}
    variants: list[tuple[str, ...]] = []
    for _ in range(n):
        new = []
        for text, text_slots in zip(texts, slots):
            choices = []
            for slot in text_slots:
                replace = rng.random() < p
                choices.append(slot.candidates[rng.randrange(len(slot.candidates))] if replace else None)
            new.append(replace_words(text, text_slots, choices))
        variant = tuple(new)
        if variant not in seen:
            seen.add(variant)
            variants.append(variant)
    return variants
