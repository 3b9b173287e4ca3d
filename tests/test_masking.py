"""Masked copies of the training text (``distill --masked-copies``): which words are masked, by hand, and the
copies seeded per row (distill reading them: ``tests/test_teacher_store.py``)."""

from __future__ import annotations

import random

import pytest

from ghostify.augment.masking import MASKED_SHARE, check_copies, mask_value, mask_words, masked_copies
from ghostify.errors import GhostifyError


class _Draws:
    """A stand-in for random.Random that returns the given draws in order."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


def test_words_under_the_share_are_masked_and_the_rest_kept_as_written():
    # four words, four draws: the first and the last fall under 0.15; punctuation and spaces are kept
    assert mask_words("The cat, sat (down).", "[MASK]", _Draws(0.01, 0.5, 0.2, 0.149)) == "[MASK] cat, sat ([MASK])."
    assert mask_value(["EU", "rejects", "German"], "<mask>", _Draws(0.9, 0.1, 0.3)) == ["EU", "<mask>", "German"]
    assert MASKED_SHARE == 0.15


def test_about_the_share_of_words_is_masked():
    text = " ".join(f"w{i}" for i in range(4000))
    masked = mask_words(text, "[MASK]", random.Random(0)).split()
    assert len(masked) == 4000 and 0.13 < masked.count("[MASK]") / 4000 < 0.17


def test_copies_follow_each_other_and_each_row_draws_its_own_stream():
    import datasets

    rows = datasets.Dataset.from_dict({"question": [f"q{i} a b c d e f" for i in range(6)],
                                       "context": [" ".join(f"c{i}w{j}" for j in range(30)) for i in range(6)],
                                       "id": [str(i) for i in range(6)]})
    copies = masked_copies(rows, ["question", "context"], "[MASK]", 2, seed=3)
    assert copies.column_names == ["question", "context"] and len(copies) == 12
    assert copies.to_dict() == masked_copies(rows, ["question", "context"], "[MASK]", 2, seed=3).to_dict()
    assert copies[:6] != copies[6:]  # the second copy masks other words
    assert masked_copies(rows, ["question", "context"], "[MASK]", 2, seed=4)["context"] != copies["context"]
    # a row's copy does not depend on the rows beside it
    assert masked_copies(rows.select(range(3)), ["question", "context"], "[MASK]", 1, seed=3)[:3] == copies[:3]
    for original, copy in zip(rows["context"], copies["context"]):
        kept = [w for w, c in zip(original.split(), copy.split()) if c != "[MASK]"]
        assert len(copy.split()) == 30 and kept == [w for w in copy.split() if w != "[MASK]"]


@pytest.mark.parametrize("copies", [-1, 1.5, True, "2"])
def test_a_count_that_is_not_a_whole_number_is_refused(copies):
    with pytest.raises(GhostifyError, match="--masked-copies .* must be a whole number of 0 or more"):
        check_copies(copies)
