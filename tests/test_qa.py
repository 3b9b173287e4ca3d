"""Extractive QA: windowed training/evaluation features, span post-processing and SQuAD metrics, checked against
hand-computed cases with a real (word-piece) fast tokenizer built offline."""

from __future__ import annotations

import pytest
import torch

from ghostify.data.qa import (
    QAColumns,
    eval_features,
    exact_match,
    f1,
    normalize_answer,
    postprocess,
    squad_metrics,
    train_features,
)
from ghostify.errors import DataError

COLUMNS = QAColumns()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "where", "is", "the", "cat", "sat", "on", "mat",
         "in", "a", "house", "dog", "was", "run", "##ning"]
# 9 word tokens t0..t8; with the 2-token question "what is" every window is [CLS] what is [SEP] <4 context> [SEP]
# (max_length 9), and doc_stride 2 makes the windows hold context tokens [0-3], [2-5], [4-7], [6-8]
CAT = "the cat sat on the mat in a house"
# "running" is two pieces, run ##ning: t0 the, t1 dog, t2 was, t3 run, t4 ##ning, t5 in, t6 the, t7 house;
# windows [0-3], [2-5], [4-7]
DOG = "the dog was running in the house"
QUESTION = "what is"
WINDOW = {"max_length": 9, "doc_stride": 2}
QUESTION_TOKENS = 4  # [CLS] what is [SEP]: the first context token sits at index 4


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import BertTokenizerFast

    directory = tmp_path_factory.mktemp("qa-tokenizer")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(str(directory))
    assert tokenizer.is_fast and tokenizer.tokenize("running") == ["run", "##ning"]
    return tokenizer


def _batch(*rows: tuple[str, str, str | None]) -> dict[str, list]:
    """Columns of (question, context, answer text or None) rows; answer_start is the answer's first occurrence."""
    return {
        "question": [q for q, _, _ in rows],
        "context": [c for _, c, _ in rows],
        "answers": [
            {"text": [], "answer_start": []} if a is None else {"text": [a], "answer_start": [c.index(a)]}
            for _, c, a in rows
        ],
    }


def _tokens(tok, features, window: int) -> list[str]:
    return tok.convert_ids_to_tokens(features["input_ids"][window])


def _positions(features) -> list[tuple[int, int]]:
    return list(zip(features["start_positions"], features["end_positions"]))


# ----------------------------------------------------------------------------------------------
# training features
# ----------------------------------------------------------------------------------------------
def test_windows_are_the_ones_computed_by_hand(tok):
    features = train_features(_batch((QUESTION, CAT, "cat")), tok, columns=COLUMNS, **WINDOW)
    contexts = [_tokens(tok, features, w)[QUESTION_TOKENS:-1] for w in range(4)]
    assert contexts == [["the", "cat", "sat", "on"], ["sat", "on", "the", "mat"], ["the", "mat", "in", "a"],
                        ["in", "a", "house"]]
    assert _tokens(tok, features, 0)[:QUESTION_TOKENS] == ["[CLS]", "what", "is", "[SEP]"]
    assert set(features) == {"input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions"}
    assert features["token_type_ids"][0] == [0, 0, 0, 0, 1, 1, 1, 1, 1]


def test_answer_split_across_windows_is_cls_where_cut(tok):
    # "on the mat" = t3..t5: window 0 cuts after "on", window 2 starts after it, window 1 holds it at 5..7
    features = train_features(_batch((QUESTION, CAT, "on the mat")), tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(0, 0), (5, 7), (0, 0), (0, 0)]
    assert _tokens(tok, features, 1)[5:8] == ["on", "the", "mat"]


def test_answer_split_inside_a_word_is_cls_where_cut(tok):
    # "running" = run ##ning (t3, t4): window 0 ends after "run", window 2 begins with "##ning"
    features = train_features(_batch((QUESTION, DOG, "running")), tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(0, 0), (5, 6), (0, 0)]
    assert _tokens(tok, features, 1)[5:7] == ["run", "##ning"]


def test_answer_at_window_edges(tok):
    # "sat on" = t2..t3: the last two context tokens of window 0 (indices 6, 7; 8 is [SEP]) and the first two
    # of window 1 (indices 4, 5)
    features = train_features(_batch((QUESTION, CAT, "sat on")), tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(6, 7), (4, 5), (0, 0), (0, 0)]
    # the last context token of the last window (t8 "house" at index 6) and a single-token answer
    features = train_features(_batch((QUESTION, CAT, "house")), tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(0, 0), (0, 0), (0, 0), (6, 6)]
    # the first context token of the first window; "the" occurs again (t4) but answer_start points at t0
    features = train_features(_batch((QUESTION, CAT, "the cat")), tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(4, 5), (0, 0), (0, 0), (0, 0)]


def test_answer_start_chooses_the_occurrence(tok):
    # "the" at t4 (character 15): windows 1 (index 6) and 2 (index 4) hold it, window 0 does not
    batch = {"question": [QUESTION], "context": [CAT], "answers": [{"text": ["the"], "answer_start": [15]}]}
    assert _positions(train_features(batch, tok, columns=COLUMNS, **WINDOW)) == [(0, 0), (6, 6), (4, 4), (0, 0)]


def test_unanswerable_example_is_cls_in_every_window(tok):
    batch = _batch((QUESTION, CAT, None), (QUESTION, DOG, "the dog"))
    features = train_features(batch, tok, columns=COLUMNS, **WINDOW)
    assert _positions(features) == [(0, 0)] * 4 + [(4, 5), (0, 0), (0, 0)]


def test_first_of_several_answers_is_the_label(tok):
    batch = {"question": [QUESTION], "context": [DOG], "answers": [{"text": ["house", "the house"],
                                                                     "answer_start": [DOG.index("house"), 23]}]}
    assert _positions(train_features(batch, tok, columns=COLUMNS, **WINDOW)) == [(0, 0), (0, 0), (7, 7)]


def test_custom_columns_and_leading_question_whitespace(tok):
    columns = QAColumns(question="q", context="passage", answers="gold")
    batch = {"q": ["   what is"], "passage": [CAT], "gold": [{"text": ["mat"], "answer_start": [CAT.index("mat")]}]}
    features = train_features(batch, tok, columns=columns, **WINDOW)
    assert _tokens(tok, features, 1)[:QUESTION_TOKENS] == ["[CLS]", "what", "is", "[SEP]"]
    assert _positions(features) == [(0, 0), (7, 7), (5, 5), (0, 0)]


def test_left_padding_tokenizer_puts_the_context_first(tok):
    left = tok.__class__.from_pretrained(tok.name_or_path, padding_side="left")
    features = train_features(_batch((QUESTION, CAT, "on the mat")), left, columns=COLUMNS, **WINDOW)
    # [CLS] <4 context> [SEP] what is [SEP]; windows are padded (on the left) to max_length, so that padding a
    # batch later cannot shift the answers
    assert _tokens(left, features, 1) == ["[CLS]", "sat", "on", "the", "mat", "[SEP]", "what", "is", "[SEP]"]
    assert _tokens(left, features, 3) == ["[PAD]", "[CLS]", "in", "a", "house", "[SEP]", "what", "is", "[SEP]"]
    assert features["attention_mask"][3] == [0, 1, 1, 1, 1, 1, 1, 1, 1]
    # not in a window: the index of its [CLS], 1 in the left-padded last window
    assert _positions(features) == [(0, 0), (2, 4), (0, 0), (1, 1)]


# ----------------------------------------------------------------------------------------------
# evaluation features
# ----------------------------------------------------------------------------------------------
def test_eval_features_offsets_are_none_outside_the_context(tok):
    features = eval_features(_batch((QUESTION, CAT, None), (QUESTION, DOG, None)), tok, columns=COLUMNS,
                             ids=[10, 11], **WINDOW)
    assert features["example"] == [10, 10, 10, 10, 11, 11, 11]
    assert set(features) == {"input_ids", "token_type_ids", "attention_mask", "example", "offset_mapping"}
    none = [None] * QUESTION_TOKENS  # [CLS] what is [SEP]
    # window 1 of CAT: "sat on the mat" at characters 8-11, 12-14, 15-18, 19-22
    assert features["offset_mapping"][1] == [*none, [8, 11], [12, 14], [15, 18], [19, 22], None]
    # the last window of CAT is shorter (no padding for right-padding tokenizers)
    assert features["offset_mapping"][3] == [*none, [23, 25], [26, 27], [28, 33], None]
    # window 1 of DOG: "was run ##ning in": the word pieces split "running" (12-19) at character 15
    assert features["offset_mapping"][5] == [*none, [8, 11], [12, 15], [15, 19], [20, 22], None]


def test_eval_features_need_one_id_per_example(tok):
    with pytest.raises(DataError, match="ids has 1 values for a batch of 2"):
        eval_features(_batch((QUESTION, CAT, None), (QUESTION, DOG, None)), tok, columns=COLUMNS, ids=[0], **WINDOW)


# ----------------------------------------------------------------------------------------------
# post-processing
# ----------------------------------------------------------------------------------------------
def _cat_features(tok, *contexts: str) -> tuple[list[dict], list[dict]]:
    examples = [{"question": QUESTION, "context": c} for c in contexts]
    batch = {"question": [QUESTION] * len(contexts), "context": list(contexts)}
    features = eval_features(batch, tok, columns=COLUMNS, ids=list(range(len(contexts))), **WINDOW)
    rows = [{"example": e, "offset_mapping": o} for e, o in zip(features["example"], features["offset_mapping"])]
    return examples, rows


def _logits(windows: int, marks: dict[tuple[int, int], float], length: int = 9, base: float = -5.0) -> torch.Tensor:
    """A (windows, length) tensor of `base` with marks[(window, index)] set."""
    logits = torch.full((windows, length), base)
    for (window, index), value in marks.items():
        logits[window, index] = value
    return logits


def test_postprocess_picks_the_best_span_across_windows(tok):
    examples, features = _cat_features(tok, CAT)
    # window 1: "on the mat" (5..7) scores 3 + 3; window 2: "in a" (6..7) scores 4 + 1
    start = _logits(4, {(1, 5): 3.0, (2, 6): 4.0})
    end = _logits(4, {(1, 7): 3.0, (2, 7): 1.0})
    assert postprocess(examples, features, start, end, columns=COLUMNS) == {0: "on the mat"}
    end[2, 7] = 2.5  # now "in a" scores 6.5
    assert postprocess(examples, features, start, end, columns=COLUMNS) == {0: "in a"}
    # logits as a list of 1-D tensors or of lists give the same answer
    assert postprocess(examples, features, list(start), end.tolist(), columns=COLUMNS) == {0: "in a"}


def test_postprocess_ignores_question_and_special_tokens(tok):
    examples, features = _cat_features(tok, CAT)
    # the best logits sit on [CLS] (0), the question "what is" (1, 2) and [SEP] (3, 8): none is a context span
    start = _logits(4, {(0, 0): 9.0, (0, 1): 9.0, (0, 2): 8.0, (0, 3): 9.0, (0, 5): 1.0})
    end = _logits(4, {(0, 0): 9.0, (0, 2): 9.0, (0, 8): 9.0, (0, 6): 1.0})
    assert postprocess(examples, features, start, end, columns=COLUMNS) == {0: "cat sat"}


def test_postprocess_needs_start_before_end_and_short_answers(tok):
    examples, features = _cat_features(tok, CAT)
    # window 0: the best start (7, "on") comes after the best end (5, "cat"): not a span
    start = _logits(4, {(0, 7): 5.0, (0, 4): 1.0})
    end = _logits(4, {(0, 5): 5.0, (0, 7): 0.5})
    # the next best pairs: the(4)..cat(5) = 1 + 5 = 6 beats on(7)..on(7) = 5 + 0.5 and the..on = 1 + 0.5
    assert postprocess(examples, features, start, end, columns=COLUMNS) == {0: "the cat"}
    # with n_best=1 only the reversed pair is left (and [CLS] in the other windows): no valid span, ""
    assert postprocess(examples, features, start, end, columns=COLUMNS, n_best=1) == {0: ""}
    # the..on is 4 tokens long: allowed with max_answer_length=4, not with 3 (then the 1-token "on" wins)
    start, end = _logits(4, {(0, 4): 3.0, (0, 7): 1.0}), _logits(4, {(0, 7): 3.0})
    assert postprocess(examples, features, start, end, columns=COLUMNS, max_answer_length=4) == {0: "the cat sat on"}
    assert postprocess(examples, features, start, end, columns=COLUMNS, max_answer_length=3) == {0: "on"}


def test_postprocess_version_2_null_answer(tok):
    examples, features = _cat_features(tok, CAT, DOG)  # CAT: windows 0-3, DOG: windows 4-6
    # CAT's null score is the minimum over its windows (4, 2, 3, 3): 1 + 1 = 2 (window 1), not 2 + 2 = 4 (window 0);
    # its best span "mat" (window 1, index 7) scores 0.75 + 0.75 = 1.5, DOG's "dog" (window 4, index 5) 4 + 4 = 8
    marks = {(0, 0): 2.0, (1, 0): 1.0, (2, 0): 1.5, (3, 0): 1.5, (1, 7): 0.75, (4, 0): 3.0, (4, 5): 4.0}
    start, end = _logits(7, marks), _logits(7, marks)
    # CAT: null - best = 2 - 1.5 = 0.5 > 0: no answer; DOG: null (windows 5, 6: -10) - 8 < 0: "dog"
    assert postprocess(examples, features, start, end, columns=COLUMNS, version_2=True) == {0: "", 1: "dog"}
    # 0.5 is not above a threshold of 1, nor of 0.5 itself
    for threshold in (1.0, 0.5):
        assert postprocess(examples, features, start, end, columns=COLUMNS, version_2=True,
                           null_threshold=threshold) == {0: "mat", 1: "dog"}
    # a span scoring 2.5 beats the null score 2 (with the maximum, 4, it would not)
    start[1, 7] = end[1, 7] = 1.25
    assert postprocess(examples, features, start, end, columns=COLUMNS, version_2=True) == {0: "mat", 1: "dog"}
    # v1 never predicts the null answer
    start[1, 7] = end[1, 7] = 0.75
    assert postprocess(examples, features, start, end, columns=COLUMNS) == {0: "mat", 1: "dog"}


def test_postprocess_rejects_mismatched_inputs(tok):
    examples, features = _cat_features(tok, CAT)
    with pytest.raises(DataError, match="start_logits has 3 rows for 4 features"):
        postprocess(examples, features, _logits(3, {}), _logits(4, {}), columns=COLUMNS)
    with pytest.raises(DataError, match="belongs to example 0, but there are 0 examples"):
        postprocess([], features, _logits(4, {}), _logits(4, {}), columns=COLUMNS)
    with pytest.raises(DataError, match="n_best must be a positive integer, got 0"):
        postprocess(examples, features, _logits(4, {}), _logits(4, {}), columns=COLUMNS, n_best=0)


# ----------------------------------------------------------------------------------------------
# with datasets
# ----------------------------------------------------------------------------------------------
def test_datasets_map_end_to_end(tok):
    import datasets

    datasets.disable_progress_bars()
    rows = _batch((QUESTION, CAT, "on the mat"), ("where is", DOG, None), (QUESTION, "a cat", "cat"))
    dataset = datasets.Dataset.from_dict(rows)
    train = dataset.map(lambda b: train_features(b, tok, columns=COLUMNS, **WINDOW), batched=True,
                        remove_columns=dataset.column_names)
    # CAT makes 4 windows, DOG 3, "a cat" 1 ([CLS] what is [SEP] a cat [SEP])
    assert len(train) == 4 + 3 + 1 > len(dataset)
    assert list(zip(train["start_positions"], train["end_positions"])) == [
        (0, 0), (5, 7), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (5, 5)]

    evaluation = dataset.map(lambda b, ids: eval_features(b, tok, columns=COLUMNS, ids=ids, **WINDOW),
                             batched=True, batch_size=2, with_indices=True, remove_columns=dataset.column_names)
    assert evaluation["example"] == [0, 0, 0, 0, 1, 1, 1, 2]
    assert evaluation[7]["offset_mapping"] == [None] * 4 + [[0, 1], [2, 5], None]  # None survives Arrow
    features = list(evaluation)
    start = [torch.full((len(f["input_ids"]),), -1.0) for f in features]
    end = [torch.full((len(f["input_ids"]),), -1.0) for f in features]
    start[1][5] = end[1][7] = 2.0  # "on the mat" scores 4, the null score of CAT is -2
    start[7][5] = end[7][5] = 2.0  # "cat"
    for window in (4, 5, 6):  # DOG: null score 10, its best span -2
        start[window][0] = end[window][0] = 5.0
    predictions = postprocess(list(dataset), features, start, end, columns=COLUMNS, version_2=True)
    assert predictions == {0: "on the mat", 1: "", 2: "cat"}
    references = {i: a["text"] for i, a in enumerate(dataset["answers"])}
    assert squad_metrics(predictions, references) == {
        "exact_match": 100.0, "f1": 100.0, "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 2,
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 1}


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_length": 9, "doc_stride": 9}, r"doc_stride must be an integer in \[0, max_length=9\), got 9"),
        ({"max_length": 0, "doc_stride": 0}, "max_length must be a positive integer, got 0"),
        ({"max_length": 9, "doc_stride": 4}, "question 0 of the batch is 2 tokens, leaving 4 of max_length=9"),
        ({"max_length": 4, "doc_stride": 0}, "question 0 of the batch is 2 tokens, leaving 0 of max_length=4"),
    ],
)
def test_bad_windows(tok, kwargs, message):
    with pytest.raises(DataError, match=message):
        train_features(_batch((QUESTION, CAT, "cat")), tok, columns=COLUMNS, **kwargs)


def test_bad_columns_and_answers(tok):
    with pytest.raises(DataError, match="no column 'question'.*set the names in QAColumns"):
        train_features({"context": [CAT]}, tok, columns=COLUMNS, **WINDOW)
    with pytest.raises(DataError, match="no column 'gold'"):
        train_features(_batch((QUESTION, CAT, "cat")), tok, columns=QAColumns(answers="gold"), **WINDOW)
    batch = {"question": [QUESTION], "context": [CAT], "answers": [{"text": ["cat"], "answer_start": [40]}]}
    with pytest.raises(DataError, match="starts at character 40, outside its context of 33"):
        train_features(batch, tok, columns=COLUMNS, **WINDOW)
    batch["answers"] = ["cat"]
    with pytest.raises(DataError, match="use the SQuAD layout"):
        train_features(batch, tok, columns=COLUMNS, **WINDOW)


# ----------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------
def test_normalize_answer():
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("An apple a day; theatre") == "apple day theatre"  # articles only as whole words
    assert normalize_answer("  ") == ""


def test_exact_match_and_f1():
    assert exact_match("The cat.", "cat") == 1.0
    assert exact_match("cat", "dog") == 0.0
    assert f1("the cat sat", "a cat sat down") == pytest.approx(0.8)  # precision 1, recall 2/3
    assert f1("cat cat", "cat") == pytest.approx(2 / 3)  # precision 1/2 (one cat in common), recall 1
    assert f1("dog", "cat") == 0.0
    assert f1("", "the") == 1.0  # both normalise to nothing: a correct "no answer"
    assert f1("", "cat") == 0.0 and f1("cat", "") == 0.0


def test_squad_metrics_takes_the_best_gold_answer():
    references = {0: ["cat sat", "the cat"], 1: ["dog"]}
    predictions = {0: "cat", 1: "dog house"}
    # example 0: "the cat" matches exactly; example 1: EM 0, F1 2/3 (precision 1/2, recall 1); in percent
    assert squad_metrics(predictions, references) == pytest.approx({"exact_match": 50.0, "f1": 100 * (1 + 2 / 3) / 2})


def test_squad_metrics_version_2():
    references = {0: ["cat"], 1: [], 2: [""], 3: ["big dog"]}
    predictions = {0: "the cat", 2: "dog", 3: "dog", 9: "ignored"}  # 1 is missing: ""
    # per example (EM, F1): (1, 1), (1, 1), (0, 0), (0, 2/3)
    assert squad_metrics(predictions, references) == pytest.approx({
        "exact_match": 50.0, "f1": 100 * (1 + 1 + 0 + 2 / 3) / 4,
        "HasAns_exact": 50.0, "HasAns_f1": 100 * (1 + 2 / 3) / 2, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
    })
    # as the official script, gold answers that normalise to nothing ("the") do not count: "" is wrong here
    assert squad_metrics({0: ""}, {0: ["the", "cat"]}) == {"exact_match": 0.0, "f1": 0.0}
    assert squad_metrics({}, {0: []}) == {"exact_match": 100.0, "f1": 100.0, "NoAns_exact": 100.0,
                                          "NoAns_f1": 100.0, "NoAns_total": 1}


def test_squad_metrics_bad_input():
    with pytest.raises(DataError, match="references is empty"):
        squad_metrics({}, {})
    with pytest.raises(DataError, match="not a list of answer texts"):
        squad_metrics({0: "cat"}, {0: "cat"})
