"""Extractive question answering (SQuAD v1/v2): windowed features, span post-processing and the official metrics.

Long contexts do not fit one sequence, so each example becomes several overlapping windows ("features"); training
labels and predicted spans are token indices inside a window, mapped back to the context through offset mappings.
"""

from __future__ import annotations

import heapq
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DataError

#: the token whose start/end logits stand for "no answer" (BERT-style [CLS] at position 0)
_CLS_INDEX = 0
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


@dataclass(frozen=True)
class QAColumns:
    """Column names of a QA dataset; answers use the SQuAD layout {"text": [...], "answer_start": [...]}, with
    empty lists for an unanswerable (v2) question."""

    question: str = "question"
    context: str = "context"
    answers: str = "answers"


# ----------------------------------------------------------------------------------------------
# features
# ----------------------------------------------------------------------------------------------
def _check_window(max_length: int, doc_stride: int) -> None:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise DataError(f"max_length must be a positive integer, got {max_length!r}; pass e.g. max_length=384")
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, int) or not 0 <= doc_stride < max_length:
        raise DataError(
            f"doc_stride must be an integer in [0, max_length={max_length}), got {doc_stride!r}; "
            "pass e.g. doc_stride=128"
        )


def _check_columns(examples: dict[str, list], names: Sequence[str]) -> None:
    for name in names:
        if name not in examples:
            raise DataError(
                f"the examples have no column {name!r} (columns: {', '.join(map(str, examples)) or 'none'}); "
                "set the names in QAColumns"
            )


def _encode(examples: dict[str, list], tokenizer, columns: QAColumns, max_length: int, doc_stride: int):
    """Tokenise the batch into overlapping windows; returns the encoding and the sequence index of the context."""
    _check_window(max_length, doc_stride)
    _check_columns(examples, (columns.question, columns.context))
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(
            f"question answering needs a fast tokenizer (offset mappings), got {type(tokenizer).__name__}; "
            "load it with AutoTokenizer.from_pretrained(..., use_fast=True)"
        )
    # leading whitespace of some questions (SQuAD has a few) would only waste room for the context
    questions = [str(q).lstrip() for q in examples[columns.question]]
    contexts = [str(c) for c in examples[columns.context]]
    if len(questions) != len(contexts):
        raise DataError(
            f"columns {columns.question!r} and {columns.context!r} differ in length ({len(questions)} vs "
            f"{len(contexts)}); pass one value per example in each column"
        )
    # the tokenizer panics (not a catchable Exception) when the stride does not fit beside the question
    special = tokenizer.num_special_tokens_to_add(pair=True)
    question_lengths = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    for row, length in enumerate(question_lengths):
        room = max_length - special - length
        if room <= doc_stride:
            raise DataError(
                f"question {row} of the batch is {length} tokens, leaving {max(room, 0)} of max_length={max_length} "
                f"for the context, not more than doc_stride={doc_stride}; raise max_length or lower doc_stride"
            )
    # tokenizers that pad on the left (XLNet style) want the context first and fixed-length windows, so that
    # padding a batch later does not shift the token indices of the answers
    question_first = tokenizer.padding_side != "left"
    encoded = tokenizer(
        questions if question_first else contexts,
        contexts if question_first else questions,
        truncation="only_second" if question_first else "only_first",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False if question_first else "max_length",
    )
    return encoded, 1 if question_first else 0


def _context_span(sequence_ids: list[int | None], context_index: int) -> tuple[int, int] | None:
    """First and last token of the window that belong to the context (None if the window holds none of it)."""
    tokens = [k for k, s in enumerate(sequence_ids) if s == context_index]
    return (tokens[0], tokens[-1]) if tokens else None


def _first_answer(answers: Any, row: int, context: str, column: str) -> tuple[int, int] | None:
    """(start_char, end_char) of the first gold answer, None when unanswerable."""
    if not isinstance(answers, dict) or "text" not in answers or "answer_start" not in answers:
        raise DataError(
            f"answers of example {row} in column {column!r} are {answers!r}; "
            'use the SQuAD layout {"text": [...], "answer_start": [...]}'
        )
    texts, starts = list(answers["text"]), list(answers["answer_start"])
    if len(texts) != len(starts):
        raise DataError(
            f"answers of example {row} have {len(texts)} texts but {len(starts)} answer_start values; "
            "give one answer_start per text"
        )
    if not texts:
        return None
    start, text = int(starts[0]), str(texts[0])
    if start < 0 or start + len(text) > len(context):
        raise DataError(
            f"answer {text!r} of example {row} starts at character {start}, outside its context of "
            f"{len(context)} characters; fix answer_start"
        )
    return start, start + len(text)


def answer_fault(answers: Any, context: str, *, row: int, column: str) -> bool:
    """True when the first answer's text is not at its answer_start in ``context`` (the row teaches
    nothing right: drop it); a DataError when ``answers`` is not in the SQuAD layout at all."""
    layout = '{"text": [...], "answer_start": [...]} (empty lists: no answer)'
    if isinstance(answers, str):
        raise DataError(f"answers of row {row} in column {column!r} are the string {_short(answers)}, not {layout}; "
                        f"convert the column, e.g. {{\"text\": [{_short(answers)}], \"answer_start\": [its character "
                        "offset in the context]}")
    if not isinstance(answers, dict) or "text" not in answers or "answer_start" not in answers:
        raise DataError(f"answers of row {row} in column {column!r} are {_short(answers)}, not {layout}; convert "
                        "the column to the SQuAD layout")
    texts, starts = answers["text"], answers["answer_start"]
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not isinstance(starts, Sequence):
        raise DataError(f"answers of row {row} in column {column!r} are {_short(answers)}: text and answer_start "
                        f"must be lists, as in {layout}")
    if len(texts) != len(starts):
        raise DataError(f"answers of row {row} in column {column!r} have {len(texts)} texts but {len(starts)} "
                        "answer_start values; give one answer_start per text")
    for start in starts:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise DataError(f"answer_start {start!r} of row {row} in column {column!r} is not a character offset "
                            "(an integer 0 or more); an unanswerable question has empty lists: "
                            '{"text": [], "answer_start": []}')
    if not texts:
        return False
    text, start = str(texts[0]), starts[0]
    return not text or context[start : start + len(text)] != text


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cls_index(input_ids: list[int], tokenizer) -> int:
    cls_id = getattr(tokenizer, "cls_token_id", None)
    return input_ids.index(cls_id) if cls_id is not None and cls_id in input_ids else _CLS_INDEX


def _model_inputs(encoded) -> dict[str, list]:
    """What the model takes (input_ids, attention_mask, token_type_ids when made), without the bookkeeping."""
    return {k: list(v) for k, v in encoded.items() if k not in ("offset_mapping", "overflow_to_sample_mapping")}


def train_features(
    examples: dict[str, list], tokenizer, *, columns: QAColumns, max_length: int, doc_stride: int
) -> dict[str, list]:
    """Windows of a batch with start_positions/end_positions of the first answer, or the CLS index where the window
    does not hold the whole answer (or there is none), so that the model learns "no answer here"."""
    encoded, context_index = _encode(examples, tokenizer, columns, max_length, doc_stride)
    _check_columns(examples, (columns.answers,))
    contexts = [str(c) for c in examples[columns.context]]
    spans = [_first_answer(a, row, contexts[row], columns.answers) for row, a in enumerate(examples[columns.answers])]
    if len(spans) != len(contexts):
        raise DataError(
            f"column {columns.answers!r} has {len(spans)} values for {len(contexts)} contexts; "
            "pass one answers dict per example"
        )
    starts: list[int] = []
    ends: list[int] = []
    for window, row in enumerate(encoded["overflow_to_sample_mapping"]):
        offsets = encoded["offset_mapping"][window]
        cls = _cls_index(encoded["input_ids"][window], tokenizer)
        answer = spans[row]
        context = _context_span(encoded.sequence_ids(window), context_index)
        if answer is None or context is None:
            starts.append(cls)
            ends.append(cls)
            continue
        first, last = context
        start_char, end_char = answer
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            # the answer is (partly) outside this window: another window holds it
            starts.append(cls)
            ends.append(cls)
            continue
        # the last token starting at or before the answer, and the first ending at or after it
        start = max(k for k in range(first, last + 1) if offsets[k][0] <= start_char)
        end = min(k for k in range(first, last + 1) if offsets[k][1] >= end_char)
        starts.append(start)
        ends.append(max(end, start))
    features = _model_inputs(encoded)
    features["start_positions"] = starts
    features["end_positions"] = ends
    return features


def eval_features(
    examples: dict[str, list], tokenizer, *, columns: QAColumns, max_length: int, doc_stride: int, ids: list[int]
) -> dict[str, list]:
    """The same windows for evaluation, with `example` (ids[i] of the batch's i-th example) and offset_mapping that
    is None outside the context, so that post-processing can only pick context spans."""
    encoded, context_index = _encode(examples, tokenizer, columns, max_length, doc_stride)
    ids = list(ids)
    batch = len(examples[columns.context])
    if len(ids) != batch:
        raise DataError(
            f"ids has {len(ids)} values for a batch of {batch} examples; pass the batch's indices "
            "(datasets.map(..., with_indices=True))"
        )
    example: list[int] = []
    offset_mapping: list[list[list[int] | None]] = []
    for window, row in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence_ids = encoded.sequence_ids(window)
        example.append(ids[row])
        offset_mapping.append(
            [list(o) if s == context_index else None for o, s in zip(encoded["offset_mapping"][window], sequence_ids)]
        )
    features = _model_inputs(encoded)
    features["example"] = example
    features["offset_mapping"] = offset_mapping
    return features


# ----------------------------------------------------------------------------------------------
# post-processing
# ----------------------------------------------------------------------------------------------
def _as_rows(logits, name: str, count: int) -> list[list[float]]:
    """One list of floats per feature, from a 2-D tensor/array or a sequence of 1-D tensors/lists."""
    rows = logits.tolist() if hasattr(logits, "tolist") else list(logits)
    rows = [r.tolist() if hasattr(r, "tolist") else list(r) for r in rows]
    if len(rows) != count:
        raise DataError(f"{name} has {len(rows)} rows for {count} features; pass one row of logits per feature")
    return rows


def postprocess(
    examples: list[dict],
    features: list[dict],
    start_logits,
    end_logits,
    *,
    columns: QAColumns,
    n_best: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
) -> dict[int, str]:
    """Predicted answer text per example index: the best-scoring context span over all the example's windows, or ""
    (v2) when the no-answer score beats it by more than null_threshold, as the official run_qa.py does."""
    if isinstance(n_best, bool) or not isinstance(n_best, int) or n_best < 1:
        raise DataError(f"n_best must be a positive integer, got {n_best!r}; pass e.g. n_best=20")
    if isinstance(max_answer_length, bool) or not isinstance(max_answer_length, int) or max_answer_length < 1:
        raise DataError(
            f"max_answer_length must be a positive integer, got {max_answer_length!r}; pass e.g. max_answer_length=30"
        )
    starts = _as_rows(start_logits, "start_logits", len(features))
    ends = _as_rows(end_logits, "end_logits", len(features))

    best: dict[int, tuple[float, str] | None] = {}  # example -> (score, text) of its best span so far
    null: dict[int, float] = {}  # example -> minimum no-answer score over its windows
    for feature, start_row, end_row in zip(features, starts, ends):
        if "example" not in feature or "offset_mapping" not in feature:
            raise DataError(
                f"a feature has keys {sorted(feature)}, not 'example' and 'offset_mapping'; pass the rows "
                "that eval_features made"
            )
        index, offsets = int(feature["example"]), feature["offset_mapping"]
        if not 0 <= index < len(examples):
            raise DataError(
                f"a feature belongs to example {index}, but there are {len(examples)} examples; pass the examples "
                "that the features' ids index"
            )
        best.setdefault(index, None)
        null_score = start_row[_CLS_INDEX] + end_row[_CLS_INDEX]
        null[index] = min(null.get(index, null_score), null_score)
        context = examples[index][columns.context]
        length = min(len(offsets), len(start_row), len(end_row))  # logits may carry batch padding
        top_starts = heapq.nlargest(n_best, range(length), key=start_row.__getitem__)
        top_ends = heapq.nlargest(n_best, range(length), key=end_row.__getitem__)
        for s in top_starts:
            if offsets[s] is None:
                continue
            for e in top_ends:
                if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = start_row[s] + end_row[e]
                if best[index] is None or score > best[index][0]:
                    best[index] = (score, context[offsets[s][0] : offsets[e][1]])

    predictions: dict[int, str] = {}
    for index, span in best.items():
        if span is None or (version_2 and null[index] - span[0] > null_threshold):
            predictions[index] = ""
        else:
            predictions[index] = span[1]
    return predictions


# ----------------------------------------------------------------------------------------------
# metrics (the official SQuAD v1.1 / v2.0 evaluation scripts)
# ----------------------------------------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces: the official normalisation, so that scores match."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    """1.0 when the normalised texts are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1(prediction: str, truth: str) -> float:
    """Token-level F1 of the normalised texts; two empty texts (a correct "no answer") score 1.0."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: dict[int, str], references: dict[int, list[str]]) -> dict[str, float]:
    """exact_match and f1 in percent, each the max over an example's gold answers, averaged over `references`; with
    unanswerable examples also the HasAns_/NoAns_ breakdown of the official v2 script."""
    if not references:
        raise DataError("references is empty; pass the gold answers of at least one example")
    scores: dict[bool, list[tuple[float, float]]] = {True: [], False: []}  # has-answer -> (exact, f1) per example
    for key, answers in references.items():
        if isinstance(answers, str) or not isinstance(answers, (list, tuple)):
            raise DataError(
                f"references[{key!r}] is {answers!r}, not a list of answer texts; pass answers['text'] ([] if none)"
            )
        # as the official v2 script: answers that normalise to nothing do not count, no answer at all means ""
        gold = [str(a) for a in answers if normalize_answer(str(a))] or [""]
        prediction = predictions.get(key, "")
        if not isinstance(prediction, str):
            raise DataError(f"predictions[{key!r}] is {prediction!r}, not a string; pass the answer text")
        exact = max(exact_match(prediction, g) for g in gold)
        scores[gold != [""]].append((exact, max(f1(prediction, g) for g in gold)))

    def mean(rows: list[tuple[float, float]], column: int) -> float:
        return 100.0 * sum(r[column] for r in rows) / len(rows)

    every = scores[True] + scores[False]
    result: dict[str, float] = {"exact_match": mean(every, 0), "f1": mean(every, 1)}
    if scores[False]:
        for name, rows in (("HasAns", scores[True]), ("NoAns", scores[False])):
            if rows:  # as the official script, no HasAns_ scores when every example is unanswerable
                result.update({f"{name}_exact": mean(rows, 0), f"{name}_f1": mean(rows, 1), f"{name}_total": len(rows)})
    return result
