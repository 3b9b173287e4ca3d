"""``ghostify augment``: TinyBERT-style augmentation with a tiny random masked LM and a real tokenizer."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch

from ghostify.augment import (
    STOP_WORDS,
    CandidateProposer,
    Slot,
    candidate_vocabulary,
    default_per_example,
    example_rng,
    find_words,
    match_case,
    sample_variants,
)
from ghostify.augment.proposer import _GatherMasked
from ghostify.data import load_split, resolve_task
from ghostify.steps import augment
from ghostify.testing import tiny_model

from .conftest import run_cli

# a word-level vocabulary small enough for a tiny model; "playing", "plays" and "makes" exist only as
# several pieces ("play ##ing"), so they must never be replaced
WORDS = (
    "the a an is was it this that not no and but of to with very too".split()  # stop words
    + "movie film story acting music plot scene cast script ending director actor drama comedy "
    "good great bad fine dull funny boring brilliant awful clever sweet dark long short new old "
    "love hate enjoy watch make see feel play goers".split()
)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "'", "s", *WORDS, "##ing", "##s", "x"]
STOPS_IN_VOCAB = [w for w in WORDS if w in STOP_WORDS]

TRAIN = [
    ("the movie is good and the acting is great .", 1),
    ("a dull story with boring music , not funny .", 0),
    ("this film was brilliant but the ending is too long .", 1),
    ("awful script , bad cast and a dark plot .", 0),
    ("the director makes a clever comedy with sweet music !", 1),
    ("i hate this drama and the playing of the actor .", 0),
    ("new film , old story , very fine acting .", 1),
    ("the movie's plot is short but not dull .", 1),
    ("love the music , hate the script .", 0),
    ("nothing", 0),  # one unknown word: no replaceable word, no new example
    ("watch the comedy and feel good .", 1),
    ("the scene plays well but the ending is bad .", 0),
]
VALIDATION = [("a good movie .", 1), ("a bad film .", 0), ("the acting is dull .", 0)]


def _tokenizer():
    from transformers import BertTokenizer

    return BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A tiny random masked LM, classification and regression teachers, and two CSV datasets."""
    root = tmp_path_factory.mktemp("augment")
    paths = {}
    for name, head, labels in (("mlm", "masked-lm", 2), ("teacher", "sequence-classification", 2),
                               ("regressor", "sequence-classification", 1), ("bare", "base", 2)):
        tiny_model("bert", head, num_labels=labels, vocab_size=len(VOCAB)).save_pretrained(root / name)
        _tokenizer().save_pretrained(root / name)
        paths[name] = root / name
    tiny_model("bert", "masked-lm", vocab_size=len(VOCAB)).save_pretrained(root / "no-tokenizer")
    paths["no-tokenizer"] = root / "no-tokenizer"

    single = root / "single"
    single.mkdir()
    for split, rows in (("train", TRAIN), ("validation", VALIDATION)):
        lines = ["idx,sentence,label"] + [f'{i},"{s}",{y}' for i, (s, y) in enumerate(rows)]
        (single / f"{split}.csv").write_text("\n".join(lines) + "\n")
    paths["single"] = single

    pairs = root / "pairs"
    pairs.mkdir()
    for split, rows in (("train", TRAIN[:6]), ("validation", VALIDATION)):
        lines = ["idx,sentence1,sentence2,label"] + [f'{i},"{s}","{t}",{i + 0.25}' for i, ((s, _), (t, _)) in
                                                      enumerate(zip(rows, reversed(TRAIN)))]
        (pairs / f"{split}.csv").write_text("\n".join(lines) + "\n")
    paths["pairs"] = pairs
    return paths


def _run(tiny, out, **kwargs):
    settings = dict(dataset=str(tiny["single"]), text_columns=("sentence",), label_column="label", per_example=8)
    settings.update(kwargs)
    return augment(tiny["mlm"], out, **settings)


def _rows(out: Path, split: str = "train") -> list[dict]:
    import datasets

    return datasets.load_from_disk(str(out))[split].to_list()


def _digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------------
# determinism
# ----------------------------------------------------------------------------------------------
def test_same_seed_is_byte_identical_whatever_the_batch_size_and_another_seed_differs(tiny, tmp_path):
    _run(tiny, tmp_path / "a", seed=3, batch_size=64)
    _run(tiny, tmp_path / "b", seed=3, batch_size=1)  # another batching, the same bytes
    _run(tiny, tmp_path / "c", seed=4)
    a, b, c = _digest(tmp_path / "a"), _digest(tmp_path / "b"), _digest(tmp_path / "c")
    assert "train/data-00000-of-00001.arrow" in a and "augment.json" in a
    assert a == b
    assert a["train/data-00000-of-00001.arrow"] != c["train/data-00000-of-00001.arrow"]
    assert a["validation/data-00000-of-00001.arrow"] == c["validation/data-00000-of-00001.arrow"]


def test_an_example_draws_from_its_own_stream():
    """Example i's augmentation does not depend on which other examples are augmented with it."""
    slots = [Slot(0, 5, "movie", ("film", "show", "play"))]
    first = sample_variants(("movie night",), (slots,), n=5, p=0.5, rng=example_rng(0, 7))
    again = sample_variants(("movie night",), (slots,), n=5, p=0.5, rng=example_rng(0, 7))
    other = [sample_variants(("movie night",), (slots,), n=5, p=0.5, rng=example_rng(s, 7)) for s in range(1, 6)]
    assert first == again and any(o != first for o in other)


# ----------------------------------------------------------------------------------------------
# the algorithm
# ----------------------------------------------------------------------------------------------
def test_replacement_rate_is_p_and_candidates_are_uniform():
    words = [f"w{i}" for i in range(400)]
    text = " ".join(words)
    slots, start = [], 0
    for word in words:
        slots.append(Slot(start, start + len(word), word, ("alpha", "beta", "gamma")))
        start += len(word) + 1
    variants = sample_variants((text,), (slots,), n=50, p=0.4, rng=random.Random(0))
    assert len(variants) == 50  # 400 slots: no two draws coincide
    new_words = [w for (v,) in variants for w in v.split()]
    replaced = [w for w, old in zip(new_words, words * 50) if w != old]
    assert len(replaced) / len(new_words) == pytest.approx(0.4, abs=0.01)  # 20,000 words
    for candidate in ("alpha", "beta", "gamma"):
        assert replaced.count(candidate) / len(replaced) == pytest.approx(1 / 3, abs=0.02)
    assert sample_variants((text,), (slots,), n=3, p=1.0, rng=random.Random(0))[0][0].split()[0] != "w0"


def test_duplicates_and_unchanged_draws_are_dropped():
    slots = [Slot(0, 4, "good", ("fine",))]
    variants = sample_variants(("good film",), (slots,), n=30, p=0.5, rng=random.Random(0))
    assert variants == [("fine film",)]  # the only distinct change; unchanged draws are not kept
    assert sample_variants(("x",), ([],), n=30, p=0.4, rng=random.Random(0)) == []


def test_case_of_the_replaced_word_is_kept():
    assert match_case("film", "Movie") == "Film"
    assert match_case("film", "MOVIE") == "FILM"
    assert match_case("film", "movie") == "film"
    assert match_case("Paris", "london") == "Paris"  # a cased vocabulary's own casing wins


def test_stop_words_multi_piece_and_unknown_words_are_not_replaceable():
    tokenizer = _tokenizer()
    text = "The movie's playing is NOT good, nothing plays"
    (words,) = find_words(tokenizer, [text], max_pieces=100)
    assert [w.text for w in words] == ["movie", "good"]
    assert [text[w.start : w.end] for w in words] == ["movie", "good"]
    # only the first max_pieces word-pieces are considered
    (words,) = find_words(tokenizer, [text], max_pieces=2)
    assert [w.text for w in words] == ["movie"]


def test_candidate_vocabulary_has_whole_words_only():
    tokenizer = _tokenizer()
    valid, texts = candidate_vocabulary(tokenizer, len(VOCAB) + 3)  # a model vocabulary may be larger
    allowed = {texts[i] for i in range(len(VOCAB)) if valid[i]}
    assert allowed == {w for w in WORDS if w not in STOP_WORDS} | {"x"}
    assert not valid[len(VOCAB):].any()


def test_candidates_are_the_mlms_top_k_without_the_word_itself(tiny):
    from ghostify import load_model

    model = load_model(tiny["mlm"], head="masked-lm")
    tokenizer = _tokenizer()
    proposer = CandidateProposer(model, tokenizer, top_k=5, batch_size=3)
    text = "the movie is good and the acting is great ."
    (slots,) = proposer.propose([text])
    assert [s.word for s in slots] == ["movie", "good", "acting", "great"]
    valid, _ = candidate_vocabulary(tokenizer, len(VOCAB))
    for slot in slots:
        masked = text[: slot.start] + "[MASK]" + text[slot.end :]
        encoded = tokenizer(masked, text, return_tensors="pt")  # TinyBERT's input: masked, then the original
        position = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero().item()
        with torch.no_grad():
            logits = model(**encoded).logits[0, position].masked_fill(~valid, float("-inf"))
        ranked = [VOCAB[i] for i in logits.argsort(descending=True).tolist() if VOCAB[i] != slot.word]
        assert slot.candidates == tuple(ranked[:5])


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "mpnet"])
def test_only_the_masked_position_goes_through_the_head(family):
    """The hook that keeps one hidden state per row gives the full model's logits at that row."""
    model = tiny_model(family, "masked-lm")
    ids = torch.randint(5, 99, (4, 9), generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([0, 3, 8, 5])
    with torch.no_grad():
        full = model(input_ids=ids).logits[torch.arange(4), positions]
        gather = _GatherMasked()
        gather.positions = positions
        handle = model.base_model.register_forward_hook(gather, with_kwargs=True)
        try:
            part = model(input_ids=ids).logits
        finally:
            handle.remove()
    assert part.shape == (4, 1, full.shape[-1])
    torch.testing.assert_close(part[:, 0], full)


def test_default_per_example_follows_tinybert():
    assert [default_per_example(t) for t in ("sst2", "qnli", "mnli", "qqp", "rte", "mrpc", "stsb", "cola", None)] == [
        20, 20, 10, 10, 30, 30, 30, 30, 30]


# ----------------------------------------------------------------------------------------------
# the output directory
# ----------------------------------------------------------------------------------------------
def test_output_keeps_originals_copies_labels_and_never_replaces_stop_or_multi_piece_words(tiny, tmp_path):
    result = _run(tiny, tmp_path / "out")
    rows = _rows(tmp_path / "out")
    assert set(rows[0]) == {"idx", "sentence", "label", "augmented"}
    originals = [r for r in rows if not r["augmented"]]
    assert [(r["sentence"], r["label"]) for r in originals] == TRAIN  # kept, in order, with gold labels
    assert result.originals == len(TRAIN) and result.augmented == len(rows) - len(TRAIN)
    assert result.augmented + result.duplicates == 8 * len(TRAIN)
    by_idx = {r["idx"]: r for r in originals}
    tokenizer = _tokenizer()
    changed = 0
    for row in rows:
        source = by_idx[row["idx"]]
        assert row["label"] == source["label"]  # copied
        old, new = source["sentence"].split(), row["sentence"].split()
        assert len(old) == len(new)
        for a, b in zip(old, new):
            pieces = tokenizer.tokenize(a)
            if a in STOP_WORDS or not a.isalpha() and len(pieces) == 1 or a.isalpha() and (len(pieces) > 1 or pieces == ["[UNK]"]):
                assert a == b, (source["sentence"], row["sentence"])  # stop word, punctuation, several pieces, unknown
            changed += a != b
    assert {"playing", "plays", "makes", "nothing", "i"} <= {a for r in originals for a in r["sentence"].split()}
    assert changed > 50  # the content words do change
    assert not any(r["augmented"] and r["idx"] == 9 for r in rows)  # "nothing": no replaceable word
    meta = json.loads((tmp_path / "out" / "augment.json").read_text())
    assert meta["per_example"] == 8 and meta["replace_prob"] == 0.4 and meta["top_k"] == 15 and meta["seed"] == 0
    assert meta["labels"] == "copied" and meta["originals"] == len(TRAIN) and meta["splits"]["train"] == len(rows)
    assert meta["mlm"] == str(tiny["mlm"]) and len(meta["source_sha256"]) == 64


def test_output_is_read_by_load_split_with_the_validation_split_unchanged(tiny, tmp_path):
    _run(tiny, tmp_path / "out", max_samples=5, seed=1)
    preset = resolve_task(None, text_columns=("sentence",), label_column="label")
    train = load_split(str(tmp_path / "out"), preset, "train")
    validation = load_split(str(tmp_path / "out"), preset, "validation")
    assert train.num_samples > 5 and train.has_labels
    assert sum(not a for a in train.rows["augmented"]) == 5  # a seeded subset of 5 originals
    assert [(r["sentence"], r["label"]) for r in validation.rows] == VALIDATION


def test_label_with_a_teacher(tiny, tmp_path):
    from ghostify import load_model

    _run(tiny, tmp_path / "out", label_with=str(tiny["teacher"]))
    rows = _rows(tmp_path / "out")
    assert [(r["sentence"], r["label"]) for r in rows if not r["augmented"]] == TRAIN  # gold labels kept
    new = [r for r in rows if r["augmented"]]
    teacher = load_model(tiny["teacher"], head="sequence-classification")
    with torch.no_grad():
        encoded = _tokenizer()([r["sentence"] for r in new], padding=True, return_tensors="pt")
        predicted = teacher(**encoded).logits.argmax(-1).tolist()
    assert [r["label"] for r in new] == predicted
    assert json.loads((tmp_path / "out" / "augment.json").read_text())["label_with"] == str(tiny["teacher"])


def test_sentence_pairs_and_regression_labels(tiny, tmp_path, capsys):
    from ghostify import load_model

    settings = dict(dataset=str(tiny["pairs"]), text_columns=("sentence1", "sentence2"), label_column="label")
    with pytest.warns(UserWarning, match="regression"):
        _run(tiny, tmp_path / "copied", **settings)
    rows = _rows(tmp_path / "copied")
    originals = {r["idx"]: r for r in rows if not r["augmented"]}
    new = [r for r in rows if r["augmented"]]
    assert all(r["label"] == originals[r["idx"]]["label"] for r in new)  # scores copied, with the warning
    assert any(r["sentence1"] != originals[r["idx"]]["sentence1"] for r in new)
    assert any(r["sentence2"] != originals[r["idx"]]["sentence2"] for r in new)  # both texts are augmented
    assert any(r["sentence1"] != originals[r["idx"]]["sentence1"] and r["sentence2"] != originals[r["idx"]]["sentence2"]
               for r in new)

    _run(tiny, tmp_path / "teacher", label_with=str(tiny["regressor"]), **settings)
    new = [r for r in _rows(tmp_path / "teacher") if r["augmented"]]
    teacher = load_model(tiny["regressor"], head="sequence-classification")
    with torch.no_grad():
        encoded = _tokenizer()([r["sentence1"] for r in new], [r["sentence2"] for r in new], padding=True, return_tensors="pt")
        predicted = teacher(**encoded).logits[:, 0]
    torch.testing.assert_close(torch.tensor([r["label"] for r in new]), predicted, atol=1e-6, rtol=1e-5)

    with pytest.raises(Exception, match="predicts 2 label"):
        _run(tiny, tmp_path / "wrong", label_with=str(tiny["teacher"]), **settings)
    assert not (tmp_path / "wrong").exists()


def test_unlabelled_data_is_augmented_and_labelled_by_the_teacher_throughout(tiny, tmp_path):
    data = tmp_path / "unlabelled"
    data.mkdir()
    (data / "train.csv").write_text("text\n" + "\n".join(f'"{s}"' for s, _ in TRAIN[:4]) + "\n")
    settings = dict(dataset=str(data), text_columns=("text",), label_column=None)
    _run(tiny, tmp_path / "plain", **settings)
    assert set(_rows(tmp_path / "plain")[0]) == {"text", "augmented"}
    _run(tiny, tmp_path / "labelled", label_with=str(tiny["teacher"]), **settings)
    rows = _rows(tmp_path / "labelled")
    assert {r["label"] for r in rows} <= {0, 1} and sum(not r["augmented"] for r in rows) == 4


# ----------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------
def _error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _cli(tiny, out, *extra):
    return ["augment", "--mlm", tiny["mlm"], "-o", out, "--dataset", tiny["single"], "--text-columns", "sentence",
            "--label-column", "label", "--per-example", "3", *extra]


def test_cli_writes_and_refuses_an_existing_output(tiny, tmp_path, capsys):
    code, _, err = run_cli(capsys, *_cli(tiny, tmp_path / "out"))
    assert code == 0, err
    assert "wrote" in err and (tmp_path / "out" / "dataset_dict.json").is_file()
    before = _digest(tmp_path / "out")
    code, _, err = run_cli(capsys, *_cli(tiny, tmp_path / "out", "--seed", "5"))
    assert code != 0 and "--overwrite" in _error_line(err)
    assert _digest(tmp_path / "out") == before
    code, _, err = run_cli(capsys, *_cli(tiny, tmp_path / "out", "--seed", "5", "--overwrite"))
    assert code == 0, err
    assert _digest(tmp_path / "out") != before


def test_cli_help_has_examples(capsys):
    code, out, _ = run_cli(capsys, "augment", "--help")
    assert code == 0 and "Examples" in out and "ghostify augment --mlm" in out


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("bare", "without a masked-LM head; --mlm needs a …ForMaskedLM checkpoint"),
        ("no-tokenizer", "no tokenizer in"),
        ("into-input", "is the input"),
        ("inside-input", "lies inside the input"),
        ("teacher-without-head", "without a trained classification head"),
        ("replace-prob", "outside (0, 1]"),
    ],
)
def test_cli_errors_are_one_line(tiny, tmp_path, capsys, case, message):
    out = tmp_path / "out"
    args = _cli(tiny, out)
    if case in ("bare", "no-tokenizer"):
        args[2] = tiny[case]
    elif case == "into-input":
        args[4] = tiny["single"]
        args.append("--overwrite")
    elif case == "inside-input":
        out = tiny["single"] / "augmented"
        args[4] = out
    elif case == "teacher-without-head":
        args += ["--label-with", tiny["mlm"]]
    elif case == "replace-prob":
        args += ["--replace-prob", "0"]
    before = _digest(tiny["single"])
    code, _, err = run_cli(capsys, *args)
    assert code != 0
    assert message in _error_line(err)
    assert not out.exists() and _digest(tiny["single"]) == before


def test_cli_refuses_a_real_encoder_without_mlm_head(minilm, tiny, tmp_path, capsys):
    args = _cli(tiny, tmp_path / "out")
    args[2] = minilm
    code, _, err = run_cli(capsys, *args)
    line = _error_line(err)
    assert code != 0 and "BertModel" in line and "…ForMaskedLM" in line


@pytest.mark.real
def test_real_sst2_sentences(glue, minilm, tmp_path, capsys):
    """8 real SST-2 sentences, the real MiniLM tokenizer and a tiny random MLM of its vocabulary size."""
    from ghostify.files import copy_tokenizer

    mlm = tmp_path / "mlm"
    tiny_model("bert", "masked-lm", vocab_size=30522).save_pretrained(mlm)
    copy_tokenizer(minilm, mlm)
    code, _, err = run_cli(capsys, "augment", "--mlm", mlm, "--task", "sst2", "--dataset", glue, "-o", tmp_path / "out",
                           "--max-samples", "8", "--per-example", "5")
    assert code == 0, err
    preset = resolve_task("sst2")
    train = load_split(str(tmp_path / "out"), preset, "train")
    validation = load_split(str(tmp_path / "out"), preset, preset.validation_split)
    assert validation.num_samples == 872 and train.rows.features["label"].names == ["negative", "positive"]
    rows = train.rows.to_list()
    originals = {r["idx"]: r for r in rows if not r["augmented"]}
    assert len(originals) == 8 and len(rows) > 8 * 3
    for row in rows:
        old, new = originals[row["idx"]]["sentence"].split(), row["sentence"].split()
        assert len(old) == len(new) and row["label"] == originals[row["idx"]]["label"]
        assert all(a == b for a, b in zip(old, new) if a.lower() in STOP_WORDS)
