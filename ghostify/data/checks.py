"""What rows of a split can be used, checked once when the split is read.

A fault that makes the whole column unreadable (answers that are not in the SQuAD layout, a label
that is missing, a text cell that is empty or holds a list of words, a regression score that is
not a number) is one ``DataError`` naming the row and the fix. A row that is merely unusable (no
words to tag, an answer that is not where its ``answer_start`` says) is dropped, and the rows
dropped are one counted warning; when no row is left, that is an error too.

A row is named by ``place(i)``: its line or row in a data file (as a person counts them there),
else its index in the split."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..errors import DataError
from .qa import answer_fault
from .readers import is_missing
from .tasks import TaskPreset

#: the metric that makes a task without a preset a regression (one score per text)
REGRESSION_METRIC = "pearson_spearman"

#: why a row is dropped, as the warning counts it
NO_TOKENS = "with no tokens"
ANSWER_ELSEWHERE = "whose answer is not at its answer_start in the context"


def usable_rows(rows: Any, task: TaskPreset, *, dataset: str, split: str, labels: bool,
                place: Callable[[int], str]) -> Any:
    """``rows`` (a datasets.Dataset) without the rows that cannot be used, said in one warning;
    ``labels``: the target column will be read; ``place(i)``: row ``i`` in words."""
    if task.kind != "tokens":  # a tagging task's words are lists by design (token_labels.py reads them)
        check_texts(rows, task.input_columns, dataset=dataset, place=place)
    if task.kind == "classification" and labels:
        check_labels(rows, task.label_column, place=place)
        if task.is_regression or task.metric == REGRESSION_METRIC:
            check_scores(rows, task, dataset=dataset, place=place)
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


def check_texts(rows: Any, columns: tuple[str, ...], *, dataset: str, place: Callable[[int], str]) -> None:
    """Every cell of the text ``columns`` is a string: a list of words, a number or an empty cell
    (None: an empty CSV cell, a JSON null) would reach the tokenizer, which fails without saying where."""
    for column in columns:
        values = rows[column]
        other = next((i for i, value in enumerate(values)
                      if not isinstance(value, str) and not is_missing(value)), None)
        if other is not None and isinstance(values[other], (list, tuple)):
            raise DataError(f"column {column!r} of {dataset} holds lists of words, not texts ({place(other)}: "
                            f"{_preview(values[other])}); join each row's words into one string (' '.join(words)), or "
                            f"to tag each word use --tokens-column {column} with --tags-column")
        if other is not None:
            raise DataError(f"column {column!r} of {dataset} holds {type(values[other]).__name__} values, not texts "
                            f"({place(other)}: {_preview(values[other])}); convert the column to strings, or name the "
                            "text with --text-columns")
        missing = [i for i, value in enumerate(values) if is_missing(value)]
        if missing:
            more = f" (and {len(missing) - 1} more rows)" if len(missing) > 1 else ""
            raise DataError(f"{place(missing[0])} has no text: column {column!r} is empty{more}; give every row its "
                            "text or drop those rows")


def check_labels(rows: Any, column: str, *, place: Callable[[int], str]) -> None:
    """Every row has a label: a missing one (None, NaN: an empty CSV cell) would turn the loss into NaN."""
    missing = [i for i, label in enumerate(rows[column]) if is_missing(label)]
    if missing:
        value = "empty" if rows[missing[0]][column] is None else "NaN"
        more = f" (and {len(missing) - 1} more rows)" if len(missing) > 1 else ""
        raise DataError(f"{place(missing[0])} has no label: column {column!r} is {value}"
                        f"{more}; give every row a label (a class id or a score) or drop those rows")


def check_scores(rows: Any, task: TaskPreset, *, dataset: str, place: Callable[[int], str]) -> None:
    """A regression reads numbers: class names (strings, or a ClassLabel's ids) would be mapped to
    class ids and scored as ranks, silently."""
    import datasets

    column = task.label_column
    why = f"task {task.name} is a regression (metric {task.metric or REGRESSION_METRIC})"
    fix = ("a regression needs numeric scores: convert the column to numbers, or to predict classes choose "
           "--metric accuracy, f1_accuracy or matthews")
    feature = rows.features.get(column) if getattr(rows, "features", None) is not None else None
    if isinstance(feature, datasets.ClassLabel):
        raise DataError(f"{why}, but column {column!r} of {dataset} holds class names ({', '.join(feature.names)}); "
                        f"{fix}")
    for i, value in enumerate(rows[column]):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(f"{why}, but {place(i)} holds the label {_preview(value)} in column {column!r}, not a "
                            f"number; {fix}")


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


def _preview(value: Any, width: int = 60) -> str:
    """``value`` as a short repr: a list by its first words."""
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return repr(list(value[:4]))[:-1] + ", ...]"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
