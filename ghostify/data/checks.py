"""What rows of a split can be used, checked once when the split is read.

A fault that makes the whole column unreadable (answers that are not in the SQuAD layout, a label
that is missing) is one ``DataError`` naming the row and the fix. A row that is merely unusable (no
words to tag, an answer that is not where its ``answer_start`` says) is dropped, and the rows
dropped are one counted warning; when no row is left, that is an error too."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

from ..errors import DataError
from .qa import answer_fault
from .tasks import TaskPreset

#: why a row is dropped, as the warning counts it
NO_TOKENS = "with no tokens"
ANSWER_ELSEWHERE = "whose answer is not at its answer_start in the context"


def usable_rows(rows: Any, task: TaskPreset, *, dataset: str, split: str, labels: bool) -> Any:
    """``rows`` (a datasets.Dataset) without the rows that cannot be used, said in one warning;
    ``labels``: the target column will be read."""
    if task.kind == "classification" and labels:
        check_labels(rows, task.label_column, dataset=dataset, split=split)
    reasons: dict[int, str] = {}
    if task.kind == "tokens":
        reasons = {i: NO_TOKENS for i, words in enumerate(rows[task.tokens_column]) if _empty(words)}
    elif task.kind == "qa" and labels:
        reasons = answer_reasons(rows[task.answers_column], rows[task.context_column], column=task.answers_column)
    if not reasons:
        return rows
    counts = ", ".join(f"{n} {reason}" for reason, n in Counter(reasons.values()).most_common())
    where = f"split {split!r} of {dataset}"
    if len(reasons) == len(rows):
        raise DataError(f"none of the {len(rows)} rows of {where} can be used: {counts}; fix the rows "
                        "(or check the columns you named)")
    warnings.warn(f"dropped {len(reasons)} of {len(rows)} rows of {where}: {counts}", UserWarning, stacklevel=3)
    return rows.select([i for i in range(len(rows)) if i not in reasons])


def check_labels(rows: Any, column: str, *, dataset: str, split: str) -> None:
    """Every row has a label: a missing one (None, NaN: an empty CSV cell) would turn the loss into NaN."""
    missing = [i for i, label in enumerate(rows[column])
               if label is None or (isinstance(label, float) and math.isnan(label))]
    if missing:
        value = "empty" if rows[missing[0]][column] is None else "NaN"
        more = f" (and {len(missing) - 1} more rows)" if len(missing) > 1 else ""
        raise DataError(f"row {missing[0]} of split {split!r} of {dataset} has no label: column {column!r} is {value}"
                        f"{more}; give every row a label (a class id or a score) or drop those rows")


def answer_reasons(answers: list[Any], contexts: list[Any], *, column: str) -> dict[int, str]:
    """The rows whose first answer is not where its answer_start says; a DataError for answers
    that are not in the SQuAD layout."""
    reasons = {}
    for row, (answer, context) in enumerate(zip(answers, contexts)):
        if answer_fault(answer, str(context), row=row, column=column):
            reasons[row] = ANSWER_ELSEWHERE
    return reasons


def _empty(words: Any) -> bool:
    return words is None or (not isinstance(words, str) and hasattr(words, "__len__") and len(words) == 0)
