"""Token classification data: word tags aligned to sub-words, tag names, seqeval metrics and decoding, checked
against hand-computed cases with tokenizers built locally (no downloads)."""

from __future__ import annotations

import math

import datasets
import pytest
import torch
import transformers
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
from seqeval.scheme import IOB2

from ghostify.data.token_labels import (
    IGNORE,
    SCHEMES,
    align_labels,
    continuation_labels,
    decode,
    entity_metrics,
    label_names,
    tag_ids,
    tokenize_words,
)
from ghostify.errors import DataError

NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
O, B_PER, I_PER, B_LOC, I_LOC = range(5)
WORDPIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "john", "live", "##s", "in", "new", "york", "mary", "walk",
              "to", "ber", "##lin", "##ing"]
CLS, SEP = WORDPIECES.index("[CLS]"), WORDPIECES.index("[SEP]")
#: "lives" -> live ##s, "walks" -> walk ##s, "berlin" -> ber ##lin
JOHN = (["john", "lives", "in", "new", "york"], [B_PER, O, O, B_LOC, I_LOC])
MARY = (["mary", "walks", "to", "berlin"], [B_PER, O, O, B_LOC])


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A real fast WordPiece tokenizer from a vocab file. transformers 5 ignores BertTokenizerFast(vocab_file=...)
    (every word becomes [UNK]), so it is loaded from a directory holding vocab.txt."""
    folder = tmp_path_factory.mktemp("bert")
    (folder / "vocab.txt").write_text("\n".join(WORDPIECES) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(folder))
    assert tokenizer.is_fast
    assert tokenizer.tokenize("lives in berlin") == ["live", "##s", "in", "ber", "##lin"]
    return tokenizer


def ids(*pieces: str) -> list[int]:
    return [WORDPIECES.index(p) for p in pieces]


def roberta(add_prefix_space: bool):
    """A real byte-level BPE tokenizer of the RoBERTa family: "york" after a space is "Ġ" + "york"."""
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġ", "j", "o", "h", "n", "y", "r", "k", "jo", "hn", "john",
              "Ġjohn", "yo", "rk", "york"]
    merges = [("j", "o"), ("h", "n"), ("jo", "hn"), ("Ġ", "john"), ("y", "o"), ("r", "k"), ("yo", "rk")]
    return transformers.RobertaTokenizer(vocab={p: i for i, p in enumerate(pieces)}, merges=merges,
                                         add_prefix_space=add_prefix_space)


# --- align_labels ----------------------------------------------------------------------------------------------------


def test_align_by_hand():
    word_ids = [None, 0, 1, 1, 2, 3, 3, 3, None]
    word_labels = [B_PER, O, O, B_LOC]
    assert align_labels(word_ids, word_labels) == [IGNORE, B_PER, O, IGNORE, O, B_LOC, IGNORE, IGNORE, IGNORE]
    assert align_labels(word_ids, word_labels, label_all_subwords=True) == [
        IGNORE, B_PER, O, O, O, B_LOC, B_LOC, B_LOC, IGNORE]
    continuation = continuation_labels(NAMES)
    assert align_labels(word_ids, word_labels, label_all_subwords=True, continuation=continuation) == [
        IGNORE, B_PER, O, O, O, B_LOC, I_LOC, I_LOC, IGNORE]


def test_align_keeps_ignored_words_ignored():
    assert align_labels([None, 0, 0, 1, None], [IGNORE, B_PER], label_all_subwords=True) == [
        IGNORE, IGNORE, IGNORE, B_PER, IGNORE]


def test_align_refuses_word_without_label():
    with pytest.raises(DataError, match="word id 2 has no label"):
        align_labels([None, 0, 1, 2, None], [O, O])
    with pytest.raises(DataError, match="outside continuation"):
        align_labels([0, 0], [7], label_all_subwords=True, continuation=continuation_labels(NAMES))


def test_continuation_labels():
    assert continuation_labels(NAMES) == [O, I_PER, I_PER, I_LOC, I_LOC]
    # B-X without an I-X keeps its own id; names without prefixes (POS) map to themselves
    assert continuation_labels(["O", "B-MISC", "I-ORG", "B-ORG"]) == [0, 1, 2, 2]
    assert continuation_labels(["NN", "VB", "DT"]) == [0, 1, 2]


def test_align_with_a_real_tokenizer(bert):
    encoded = bert([JOHN[0], MARY[0]], is_split_into_words=True)
    assert encoded["input_ids"][0] == [CLS, *ids("john", "live", "##s", "in", "new", "york"), SEP]
    assert encoded["input_ids"][1] == [CLS, *ids("mary", "walk", "##s", "to", "ber", "##lin"), SEP]
    john, mary = encoded.word_ids(0), encoded.word_ids(1)
    assert align_labels(john, JOHN[1]) == [IGNORE, B_PER, O, IGNORE, O, B_LOC, I_LOC, IGNORE]
    assert align_labels(mary, MARY[1]) == [IGNORE, B_PER, O, IGNORE, O, B_LOC, IGNORE, IGNORE]
    # every sub-word labelled: "##lin" of the B-LOC word "berlin" continues as I-LOC
    continuation = continuation_labels(NAMES)
    assert align_labels(mary, MARY[1], label_all_subwords=True, continuation=continuation) == [
        IGNORE, B_PER, O, O, O, B_LOC, I_LOC, IGNORE]


# --- tokenize_words --------------------------------------------------------------------------------------------------


def test_tokenize_words_batch(bert):
    batch = {"tokens": [JOHN[0], MARY[0]], "ner_tags": [JOHN[1], MARY[1]]}
    out = tokenize_words(batch, bert, tokens_column="tokens", tags_column="ner_tags", max_length=32)
    assert out["input_ids"][1] == [CLS, *ids("mary", "walk", "##s", "to", "ber", "##lin"), SEP]
    assert out["labels"] == [[IGNORE, B_PER, O, IGNORE, O, B_LOC, I_LOC, IGNORE],
                             [IGNORE, B_PER, O, IGNORE, O, B_LOC, IGNORE, IGNORE]]
    assert all(len(labels) == len(tokens) for labels, tokens in zip(out["labels"], out["input_ids"]))
    assert out["attention_mask"][0] == [1] * 8


def test_truncation_keeps_alignment(bert):
    batch = {"tokens": [JOHN[0]], "ner_tags": [JOHN[1]]}
    # cut after the whole word "lives": [CLS] john live ##s [SEP]
    out = tokenize_words(batch, bert, tokens_column="tokens", tags_column="ner_tags", max_length=5)
    assert out["input_ids"] == [[CLS, *ids("john", "live", "##s"), SEP]]
    assert out["labels"] == [[IGNORE, B_PER, O, IGNORE, IGNORE]]
    # cut inside "lives": its first sub-word keeps the word's label
    out = tokenize_words(batch, bert, tokens_column="tokens", tags_column="ner_tags", max_length=4,
                         label_all_subwords=True, continuation=continuation_labels(NAMES))
    assert out["input_ids"] == [[CLS, *ids("john", "live"), SEP]]
    assert out["labels"] == [[IGNORE, B_PER, O, IGNORE]]


def test_tokenize_words_through_datasets_map(bert):
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NAMES))})
    rows = datasets.Dataset.from_dict({"tokens": [JOHN[0], MARY[0], []], "ner_tags": [JOHN[1], MARY[1], []]},
                                      features=features)
    names = label_names(rows, "ner_tags")
    assert names == NAMES
    mapped = rows.map(tokenize_words, batched=True, batch_size=2, remove_columns=rows.column_names,
                      fn_kwargs={"tokenizer": bert, "tokens_column": "tokens", "tags_column": "ner_tags",
                                 "max_length": 16, "label_all_subwords": True,
                                 "continuation": continuation_labels(names)})
    assert mapped.column_names == ["input_ids", "token_type_ids", "attention_mask", "labels"]
    assert mapped["labels"] == [[IGNORE, B_PER, O, O, O, B_LOC, I_LOC, IGNORE],
                                [IGNORE, B_PER, O, O, O, B_LOC, I_LOC, IGNORE],
                                [IGNORE, IGNORE]]  # a row without words: [CLS] [SEP]


def test_string_tags_through_datasets_map(bert):
    rows = datasets.Dataset.from_dict({"words": [MARY[0]], "tags": [["B-PER", "O", "O", "B-LOC"]]})
    names = label_names(rows, "tags")
    assert names == ["O", "B-LOC", "B-PER"]
    rows = rows.map(lambda batch: {"tags": tag_ids(batch["tags"], names)}, batched=True)
    assert rows["tags"] == [[2, 0, 0, 1]]
    mapped = rows.map(tokenize_words, batched=True, fn_kwargs={"tokenizer": bert, "tokens_column": "words",
                                                               "tags_column": "tags", "max_length": 16})
    assert mapped["labels"] == [[IGNORE, 2, 0, IGNORE, 0, 1, IGNORE, IGNORE]]


def test_tokenize_words_refuses_bad_input(bert):
    def run(batch, tokenizer=bert, max_length=16):
        return tokenize_words(batch, tokenizer, tokens_column="tokens", tags_column="tags", max_length=max_length)

    with pytest.raises(DataError, match="column 'tags' is missing"):
        run({"tokens": [["john"]]})
    with pytest.raises(DataError, match="1 words in 'tokens' but 2 tags"):
        run({"tokens": [["john"]], "tags": [[B_PER, O]]})
    with pytest.raises(DataError, match="tag_ids"):
        run({"tokens": [["john"]], "tags": [["B-PER"]]})
    with pytest.raises(DataError, match="not a list of words"):
        run({"tokens": ["john lives"], "tags": [[B_PER, O]]})
    with pytest.raises(DataError, match="not a tag id"):
        run({"tokens": [["john"]], "tags": [[-3]]})
    with pytest.raises(DataError, match="max_length 2 leaves no room"):
        run({"tokens": [["john"]], "tags": [[B_PER]]}, max_length=2)


def test_tokenize_words_needs_a_fast_tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDPIECES) + "\n", encoding="utf-8")
    slow = transformers.BertTokenizerLegacy(vocab_file=str(vocab))
    assert not slow.is_fast
    with pytest.raises(DataError, match="not a fast tokenizer"):
        tokenize_words({"tokens": [["john"]], "tags": [[B_PER]]}, slow, tokens_column="tokens", tags_column="tags",
                       max_length=16)


def test_roberta_family_needs_add_prefix_space():
    batch = {"tokens": [["john", "york"]], "tags": [[B_PER, B_LOC]]}
    kwargs = {"tokens_column": "tokens", "tags_column": "tags", "max_length": 16}
    with pytest.raises(DataError, match=r"add_prefix_space=True"):
        tokenize_words(batch, roberta(add_prefix_space=False), **kwargs)
    tokenizer = roberta(add_prefix_space=True)
    out = tokenize_words(batch, tokenizer, **kwargs)
    # pre-split words read as the text " john york" reads: Ġjohn, then Ġ + york (one word in two sub-words)
    assert out["input_ids"] == [tokenizer("john york")["input_ids"]]
    assert tokenizer.convert_ids_to_tokens(out["input_ids"][0]) == ["<s>", "Ġjohn", "Ġ", "york", "</s>"]
    assert out["labels"] == [[IGNORE, B_PER, B_LOC, IGNORE, IGNORE]]


# --- label_names and tag_ids -----------------------------------------------------------------------------------------


def test_label_names_class_label_strings_and_ints():
    features = datasets.Features({"pos": datasets.Sequence(datasets.ClassLabel(names=["DT", "NN", "VB"]))})
    assert label_names(datasets.Dataset.from_dict({"pos": [[0, 1, 2]]}, features=features), "pos") == ["DT", "NN", "VB"]
    strings = datasets.Dataset.from_dict({"ner": [["B-PER", "I-PER", "O"], ["O", "B-LOC"], []]})
    assert label_names(strings, "ner") == ["O", "B-LOC", "B-PER", "I-PER"]
    assert label_names({"chunk": [["NP", "VP"], ["PP"]]}, "chunk") == ["NP", "PP", "VP"]  # no O: just sorted
    assert label_names(datasets.Dataset.from_dict({"ids": [[0, 3], [1]]}), "ids") == ["0", "1", "2", "3"]


def test_label_names_refuses_other_columns():
    features = datasets.Features({"label": datasets.ClassLabel(names=["neg", "pos"])})
    with pytest.raises(DataError, match="one class per row"):
        label_names(datasets.Dataset.from_dict({"label": [0, 1]}, features=features), "label", dataset="sst2")
    with pytest.raises(DataError, match="sst2 has no column 'tags'"):
        label_names(datasets.Dataset.from_dict({"label": [0, 1]}), "tags", dataset="sst2")
    with pytest.raises(DataError, match="float"):
        label_names(datasets.Dataset.from_dict({"tags": [[0.5, 1.0]]}), "tags")
    with pytest.raises(DataError, match="both strings and integers"):
        label_names({"tags": [["O"], [1]]}, "tags")
    with pytest.raises(DataError, match="negative"):
        label_names({"tags": [[0, IGNORE]]}, "tags")
    with pytest.raises(DataError, match="holds no tags"):
        label_names({"tags": [[], []]}, "tags")
    with pytest.raises(DataError, match="not a list of tags"):
        label_names({"tags": ["O O"]}, "tags")


def test_tag_ids():
    assert tag_ids([["B-PER", "I-PER", "O"], [], ["B-LOC"]], NAMES) == [[B_PER, I_PER, O], [], [B_LOC]]
    assert tag_ids([[B_PER, "O"]], NAMES) == [[B_PER, O]]  # ids pass through
    with pytest.raises(DataError, match="'B-MISC' is not among the 5 tag names"):
        tag_ids([["B-MISC"]], NAMES)
    with pytest.raises(DataError, match="id below 5"):
        tag_ids([[5]], NAMES)


# --- entity_metrics --------------------------------------------------------------------------------------------------

REFERENCES = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
PREDICTIONS = [["B-PER", "I-PER", "O", "I-LOC"], ["O", "B-ORG", "O"]]


def test_entity_metrics_lenient_by_hand_and_seqeval():
    # gold entities: PER, LOC, ORG(2 tokens); predicted: PER, LOC (the lone I-LOC starts a chunk), ORG(1 token)
    # -> 2 of 3 right both ways; tokens: 5 of 7 right
    scores = entity_metrics(PREDICTIONS, REFERENCES)
    assert scores == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "accuracy": 5 / 7})
    assert scores["precision"] == pytest.approx(precision_score(REFERENCES, PREDICTIONS))
    assert scores["recall"] == pytest.approx(recall_score(REFERENCES, PREDICTIONS))
    assert scores["f1"] == pytest.approx(f1_score(REFERENCES, PREDICTIONS))
    assert scores["accuracy"] == pytest.approx(accuracy_score(REFERENCES, PREDICTIONS))


def test_entity_metrics_strict_iob2_differs():
    # strict IOB2: an entity must start with B-, so the lone I-LOC is no entity -> predicted PER, ORG(1 token):
    # precision 1/2, recall 1/3, f1 = 2 * (1/2 * 1/3) / (1/2 + 1/3) = 0.4; token accuracy does not change
    scores = entity_metrics(PREDICTIONS, REFERENCES, scheme="IOB2")
    assert scores == pytest.approx({"precision": 1 / 2, "recall": 1 / 3, "f1": 0.4, "accuracy": 5 / 7})
    assert scores["precision"] == pytest.approx(precision_score(REFERENCES, PREDICTIONS, mode="strict", scheme=IOB2))
    assert scores["recall"] == pytest.approx(recall_score(REFERENCES, PREDICTIONS, mode="strict", scheme=IOB2))
    assert scores["f1"] == pytest.approx(f1_score(REFERENCES, PREDICTIONS, mode="strict", scheme=IOB2))
    assert entity_metrics(PREDICTIONS, REFERENCES, scheme="iob2") == scores  # any case
    assert scores["f1"] != pytest.approx(entity_metrics(PREDICTIONS, REFERENCES)["f1"])


@pytest.mark.parametrize("scheme", [None, *SCHEMES])
def test_entity_metrics_perfect_and_agrees_with_seqeval(scheme):
    import seqeval.scheme

    references = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "O"]]
    if scheme in ("IOB1", "IOE1"):  # B-/E- only between two adjacent entities of one type
        references = [["I-PER", "I-PER", "O", "I-LOC"], ["O", "O"]]
    elif scheme == "IOE2":
        references = [["I-PER", "E-PER", "O", "E-LOC"], ["O", "O"]]
    elif scheme == "IOBES":
        references = [["B-PER", "E-PER", "O", "S-LOC"], ["O", "O"]]
    elif scheme == "BILOU":
        references = [["B-PER", "L-PER", "O", "U-LOC"], ["O", "O"]]
    scores = entity_metrics(references, references, scheme=scheme)
    assert scores == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "accuracy": 1.0}
    predictions = [list(references[0][:2]) + ["O", "O"], ["O", "O"]]  # the PER entity only
    scores = entity_metrics(predictions, references, scheme=scheme)
    strict = {} if scheme is None else {"mode": "strict", "scheme": getattr(seqeval.scheme, scheme)}
    assert scores["precision"] == pytest.approx(precision_score(references, predictions, **strict)) == 1.0
    assert scores["recall"] == pytest.approx(recall_score(references, predictions, **strict)) == 0.5
    assert scores["f1"] == pytest.approx(f1_score(references, predictions, **strict))
    assert scores["accuracy"] == pytest.approx(5 / 6)


def test_entity_metrics_edge_cases():
    zeros = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}
    assert entity_metrics([], []) == zeros
    assert entity_metrics([[], []], [[], []], scheme="IOB2") == zeros
    # no entity anywhere: entity scores 0 (no warning, no crash), tokens all right
    assert entity_metrics([["O", "O"]], [["O", "O"]]) == {**zeros, "accuracy": 1.0}
    with pytest.raises(DataError, match="IOB1, IOB2, IOE1, IOE2, IOBES, BILOU"):
        entity_metrics(PREDICTIONS, REFERENCES, scheme="IOB3")
    with pytest.raises(DataError, match="'S-LOC' does not fit the IOB2 scheme"):
        entity_metrics([["S-LOC"]], [["B-LOC"]], scheme="IOB2")
    with pytest.raises(DataError, match="sequence 0 has 1 predicted tags for 2 reference tags"):
        entity_metrics([["O"]], [["O", "O"]])
    with pytest.raises(DataError, match="1 predicted sequences for 2 reference"):
        entity_metrics([["O"]], [["O"], ["O"]])


# --- decode ----------------------------------------------------------------------------------------------------------


def test_decode_drops_ignored_positions():
    predictions = torch.tensor([[0, 1, 2, 0, 3], [4, 4, 0, 0, 0]])
    labels = torch.tensor([[IGNORE, B_PER, O, IGNORE, IGNORE], [IGNORE, B_LOC, I_LOC, O, IGNORE]])
    predicted, gold = decode(predictions, labels, NAMES)
    assert predicted == [["B-PER", "I-PER"], ["I-LOC", "O", "O"]]
    assert gold == [["B-PER", "O"], ["B-LOC", "I-LOC", "O"]]
    # nested lists (ragged) and logits give the same
    assert decode([[0, 1, 2], [4, 4, 0, 0]], [[IGNORE, B_PER, O], [IGNORE, B_LOC, I_LOC, O]], NAMES) == (
        [["B-PER", "I-PER"], ["I-LOC", "O", "O"]], gold[:1] + [["B-LOC", "I-LOC", "O"]])
    logits = torch.nn.functional.one_hot(predictions, len(NAMES)).float()
    assert decode(logits, labels, NAMES) == (predicted, gold)
    scores = entity_metrics(predicted, gold)
    # gold PER(1 token), LOC(2 tokens); predicted PER(2 tokens), LOC(lone I-LOC, 1 token): no match; tokens 2 of 5
    assert scores == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 2 / 5})
    assert math.isclose(scores["accuracy"], accuracy_score(gold, predicted))


def test_decode_refuses_mismatches():
    with pytest.raises(DataError, match="label id 7 in sequence 0 has no name"):
        decode([[7]], [[0]], NAMES)
    with pytest.raises(DataError, match="2 predicted tokens for 1 labels"):
        decode([[0, 1]], [[0]], NAMES)
    with pytest.raises(DataError, match="1 predicted sequences for 2 label"):
        decode([[0]], [[0], [0]], NAMES)
    assert decode([[IGNORE, 1]], [[IGNORE, 1]], NAMES) == ([["B-PER"]], [["B-PER"]])  # padded predictions skip too
