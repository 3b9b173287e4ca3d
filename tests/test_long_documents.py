"""Sentence classification of texts longer than --max-length (issue 27): with `--chunks mean|max`
a text becomes windows of --max-length tokens overlapping by --doc-stride; every window is a
training row with its text's label, and evaluation pools the windows' logits per text (PyTorch and
ONNX alike), scoring each text once. Without --chunks nothing changes (truncation)."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest
import torch

from ghostify import steps
from ghostify.data import load_split, resolve_task
from ghostify.data.loading import DOCUMENT
from ghostify.settings import DataSettings, TaskSettings
from ghostify.tasks import kind_for
from ghostify.tasks.classification import document_logits
from ghostify.testing import TOY_WORDS, tiny_checkpoint, write_toy_dataset, write_toy_pairs

from .conftest import run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")

MAX_LENGTH, STRIDE = 16, 4
#: the toy tokenizer reads one token per word and adds [CLS] and [SEP]: 14 words per window, 10 new ones each
ROOM, STEP = MAX_LENGTH - 2, MAX_LENGTH - 2 - STRIDE
#: words per validation text: short, exactly one window, one word more, and several windows
LENGTHS = (3, 14, 15, 24, 25, 40, 57, 90)


def windows_by_hand(words: int) -> int:
    return 1 + math.ceil(max(0, words - ROOM) / STEP)


def _write_long(directory: Path, lengths: dict[str, list[int]], *, seed: int = 0, regression: bool = False) -> Path:
    """CSV splits with column ``text`` (``lengths`` words each) and ``label``: whether "great" occurs
    (placed anywhere, often past the first window); regression: how often, plus 0.5."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for split, sizes in lengths.items():
        with (directory / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            for size in sizes:
                words = [rng.choice(TOY_WORDS) for _ in range(size)]
                hits = rng.randint(0, 2 if regression else 1)
                for _ in range(hits):
                    words[rng.randrange(size)] = "great"
                writer.writerow([" ".join(words), hits + 0.5 if regression else int("great" in words)])
    return directory


@pytest.fixture(scope="module")
def long_world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long-documents")
    tiny_checkpoint(root / "m")
    tiny_checkpoint(root / "reg", num_labels=1)
    rng = random.Random(1)
    _write_long(root / "long", {"train": [rng.randint(3, 60) for _ in range(24)], "validation": list(LENGTHS)})
    _write_long(root / "short", {"train": [5] * 8, "validation": [rng.randint(2, ROOM) for _ in range(10)]})
    _write_long(root / "scores", {"train": [20] * 8, "validation": list(LENGTHS)}, regression=True)
    return root


def _data(root: Path, dataset: str = "long", **data) -> DataSettings:
    return DataSettings(dataset=str(root / dataset), text_columns=("text",), max_length=MAX_LENGTH, **data)


def _kind(root: Path, chunks: str | None, dataset: str = "long"):
    data, task = _data(root, dataset), TaskSettings(chunks=chunks, doc_stride=STRIDE)
    kind = kind_for(resolve_task(None, text_columns=("text",)), data, task)
    split = load_split(str(root / dataset), kind.preset, "validation")
    kind.with_data(split)
    split.task = kind.preset
    return kind, split


def _tokenizer(root: Path):
    from ghostify.steps.common import load_tokenizer

    return load_tokenizer(root / "m")


def _eval(root: Path, model: Path | str, chunks: str | None, dataset: str = "long", **kwargs) -> dict:
    return steps.evaluate(model, data=_data(root, dataset), task_settings=TaskSettings(chunks=chunks, doc_stride=STRIDE),
                          **kwargs)


# ----------------------------------------------------------------------------------------------
# windows
# ----------------------------------------------------------------------------------------------
def test_windows_are_counted_and_overlap_as_by_hand(long_world):
    kind, split = _kind(long_world, "mean")
    tokenizer = _tokenizer(long_world)
    rows = kind.evaluation(split, tokenizer).rows
    per_text = [list(rows[DOCUMENT]).count(d) for d in range(len(LENGTHS))]
    assert per_text == [windows_by_hand(n) for n in LENGTHS]
    labels = split.rows["label"]
    for document, text in enumerate(split.rows["text"]):
        words = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(words) == LENGTHS[document]
        windows = [r for r in rows if r[DOCUMENT] == document]
        for k, window in enumerate(windows):  # [CLS] 14 words [SEP], each 10 words after the previous
            assert window["input_ids"] == [tokenizer.cls_token_id, *words[k * STEP:k * STEP + ROOM], tokenizer.sep_token_id]
            assert window["labels"] == labels[document]
    # training: the same windows as rows, with their text's label and nothing but model inputs and labels
    train = kind.encode(split, tokenizer)
    assert len(train) == len(rows) and DOCUMENT not in train.column_names
    assert train["input_ids"] == rows["input_ids"] and train["labels"] == rows["labels"]


def test_without_chunks_a_text_is_truncated_as_before(long_world):
    kind, split = _kind(long_world, None)
    rows = kind.evaluation(split, _tokenizer(long_world)).rows
    assert len(rows) == len(LENGTHS) and DOCUMENT not in rows.column_names
    assert [len(ids) for ids in rows["input_ids"]] == [min(n, ROOM) + 2 for n in LENGTHS]


def test_texts_shorter_than_max_length_score_as_today(long_world):
    truncated = _eval(long_world, long_world / "m", None, "short")
    for chunks in ("mean", "max"):
        windowed = _eval(long_world, long_world / "m", chunks, "short")
        assert windowed["metrics"] == truncated["metrics"]
        assert windowed["samples"] == truncated["samples"] == windowed["windows"] == 10
    kind, split = _kind(long_world, "max", "short")
    tokenizer = _tokenizer(long_world)
    assert kind.encode(split, tokenizer)["input_ids"] == _kind(long_world, None, "short")[0].encode(split, tokenizer)["input_ids"]


# ----------------------------------------------------------------------------------------------
# pooling: the model run on every window by hand
# ----------------------------------------------------------------------------------------------
def _pooled(kind, split, tokenizer, model):
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    evaluation = kind.evaluation(split, tokenizer)
    loader = DataLoader(evaluation.rows, batch_size=5, collate_fn=evaluation.collate)  # windows of a text split across batches
    return document_logits(model, loader, Accelerator(cpu=True), kind.task.chunks)


def _by_hand(tokenizer, model, texts: list[str]) -> list[torch.Tensor]:
    """Each text's windows built from its word ids, each run alone through the model: [windows, labels]."""
    out = []
    with torch.no_grad():
        for text in texts:
            words = tokenizer(text, add_special_tokens=False)["input_ids"]
            logits = []
            for k in range(windows_by_hand(len(words))):
                ids = [tokenizer.cls_token_id, *words[k * STEP:k * STEP + ROOM], tokenizer.sep_token_id]
                logits.append(model(input_ids=torch.tensor([ids])).logits[0])
            out.append(torch.stack(logits))
    return out


@pytest.mark.parametrize("chunks", ["mean", "max"])
def test_a_long_text_is_predicted_from_the_mean_or_max_of_its_windows(long_world, chunks):
    from ghostify.checkpoint import load_model

    model = load_model(long_world / "m", head="sequence-classification").eval()
    kind, split = _kind(long_world, chunks)
    tokenizer = _tokenizer(long_world)
    pooled, labels, windows = _pooled(kind, split, tokenizer, model)
    hand = _by_hand(tokenizer, model, split.rows["text"])
    expected = torch.stack([w.mean(0) if chunks == "mean" else w.max(0).values for w in hand])
    torch.testing.assert_close(pooled, expected, atol=1e-5, rtol=1e-5)
    assert labels.tolist() == split.rows["label"] and windows == sum(len(w) for w in hand)
    # mean and max differ on a text of several windows (the test can tell them apart)
    assert not torch.allclose(hand[-1].mean(0), hand[-1].max(0).values)


def test_regression_averages_its_windows_scores(long_world):
    from ghostify.checkpoint import load_model

    model = load_model(long_world / "reg", head="sequence-classification").eval()
    kind, split = _kind(long_world, "mean", "scores")
    assert kind.preset.is_regression
    tokenizer = _tokenizer(long_world)
    pooled, labels, _ = _pooled(kind, split, tokenizer, model)
    expected = torch.stack([w.mean(0) for w in _by_hand(tokenizer, model, split.rows["text"])])
    torch.testing.assert_close(pooled, expected, atol=1e-5, rtol=1e-5)
    assert labels.tolist() == split.rows["label"]


# ----------------------------------------------------------------------------------------------
# the commands: eval counts texts, ONNX scores the same, training reads windows
# ----------------------------------------------------------------------------------------------
def test_eval_counts_texts_and_windows(long_world, capsys):
    code, out, err = run_cli(capsys, "eval", long_world / "m", "--dataset", long_world / "long", "--text-columns", "text",
                             "--max-length", MAX_LENGTH, "--chunks", "max", "--doc-stride", STRIDE, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["samples"] == len(LENGTHS)
    assert result["windows"] == sum(windows_by_hand(n) for n in LENGTHS)
    assert "windows" not in _eval(long_world, long_world / "m", None)  # truncation: one row per text, as before


@pytest.mark.slow  # the full run (the chunks' pooling daily in PyTorch)
def test_onnx_eval_pools_like_pytorch(long_world, tmp_path):
    pytest.importorskip("onnxruntime")
    from ghostify.checkpoint import load_model
    from ghostify.export.runtime import GraphModel

    steps.export(long_world / "reg", tmp_path / "onnx", format="onnx")
    for chunks in ("mean", "max"):
        for model, dataset in ((long_world / "reg", "scores"), (long_world / "m", "long")):
            if chunks == "max" and dataset == "scores":
                continue
            if dataset == "long":
                steps.export(model, tmp_path / f"onnx-m-{chunks}", format="onnx")
                graph = tmp_path / f"onnx-m-{chunks}"
            else:
                graph = tmp_path / "onnx"
            torch_result, onnx_result = _eval(long_world, model, chunks, dataset), _eval(long_world, graph, chunks, dataset)
            assert onnx_result["samples"] == torch_result["samples"] == len(LENGTHS)
            assert onnx_result["windows"] == torch_result["windows"]
            for name, value in torch_result["metrics"].items():
                assert onnx_result["metrics"][name] == pytest.approx(value, abs=1e-4)
            kind, split = _kind(long_world, chunks, dataset)
            tokenizer = _tokenizer(long_world)
            eager = load_model(model, head="sequence-classification").eval()
            torch.testing.assert_close(_pooled(kind, split, tokenizer, GraphModel(Path(graph) / "model.onnx"))[0],
                                       _pooled(kind, split, tokenizer, eager)[0], atol=1e-4, rtol=1e-4)


def test_finetune_and_importance_read_windows(long_world, tmp_path, capsys):
    common = ["--dataset", long_world / "long", "--text-columns", "text", "--max-length", MAX_LENGTH,
              "--chunks", "mean", "--doc-stride", STRIDE]
    code, _, err = run_cli(capsys, "finetune", long_world / "m", "-o", tmp_path / "tuned", *common, "--epochs", "1",
                           "--batch-size", "8")
    assert code == 0, err
    training = json.loads((tmp_path / "tuned" / "training.json").read_text())
    evaluations = [e["eval"] for e in training["evaluations"]]  # per text: the best epoch is chosen on texts
    assert evaluations and all(e["samples"] == len(LENGTHS) and "windows" in e for e in evaluations)
    # training steps: one per batch of 8 windows, not of 8 texts
    kind, split = _kind(long_world, "mean")
    train = load_split(str(long_world / "long"), kind.preset, "train")
    texts = train.rows["text"]
    windows = sum(windows_by_hand(len(t.split())) for t in texts)
    assert windows > len(texts) and training["steps"] == math.ceil(windows / 8)
    code, _, err = run_cli(capsys, "importance", tmp_path / "tuned", "-o", tmp_path / "scored", *common)
    assert code == 0, err
    assert (tmp_path / "scored" / "importance.safetensors").is_file()


# ----------------------------------------------------------------------------------------------
# refusals: one line each, nothing changed
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long-inputs")
    tiny_checkpoint(root / "reg", num_labels=1)
    _write_long(root / "long", {"train": [20] * 8, "validation": [30] * 4})
    _write_long(root / "scores", {"train": [20] * 8, "validation": [30] * 4}, regression=True)
    write_toy_pairs(root / "pairs")
    write_toy_dataset(root / "toy", train=8, validation=4)
    return root


LONG = ["--dataset", "<long>", "--text-columns", "text"]
EVAL = ["eval", "{m}", *LONG]
CASES: list[tuple[str, list[str], str]] = [
    ("chunks-unknown", [*EVAL, "--chunks", "foo"], "--chunks 'foo': choose mean or max"),
    ("chunks-stride-equals-max-length", [*EVAL, "--chunks", "mean", "--max-length", "16", "--doc-stride", "16"],
     "--doc-stride 16 must be less than --max-length 16"),
    ("chunks-stride-above-max-length", [*EVAL, "--chunks", "max", "--max-length", "16", "--doc-stride", "40"],
     "--doc-stride 40 must be less than --max-length 16"),
    ("chunks-stride-no-room-for-text", [*EVAL, "--chunks", "mean", "--max-length", "16", "--doc-stride", "14"],
     "--doc-stride 14 must be less than the 14 text tokens of a window"),
    ("chunks-pair", ["eval", "{m}", "--dataset", "<pairs>", "--text-columns", "sentence1,sentence2", "--chunks", "mean"],
     "--chunks windows one text, but task custom reads a pair (sentence1, sentence2)"),
    ("chunks-glue-pair", ["finetune", "{m}", "-o", "{out}", "--task", "mrpc", "--chunks", "mean"],
     "task mrpc reads a pair"),
    ("chunks-max-regression", ["eval", "<reg>", "--dataset", "<scores>", "--text-columns", "text", "--chunks", "max"],
     "--chunks max pools class logits, but task custom is a regression"),
    ("chunks-qa", ["eval", "{m}", "--task", "squad", "--chunks", "mean"], "task squad is of kind qa"),
    ("chunks-tokens", ["finetune", "{m}", "-o", "{out}", "--task", "conll2003", "--chunks", "max"],
     "task conll2003 is of kind tokens"),
    ("chunks-sop", ["distill", "--teacher", "{m}", "--student", "{pruned}", "-o", "{out}", "--dataset", "<toy>", "--text-columns", "sentence",
                    "--chunks", "mean", "--sop-weight", "1"], "--sop-weight cuts each text into two segments"),
    ("chunks-uppercase", ["finetune", "{m}", "-o", "{out}", *LONG, "--chunks", "MEAN"],
     "--chunks 'MEAN': choose mean or max"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_long_document_settings_are_one_line(name, args, expected, world, long_inputs, tmp_path, capsys):
    out = tmp_path / "out"
    args = [a.replace("<", f"{long_inputs}/").replace(">", "") if a.startswith("<") else a for a in args]
    _check_refused(capsys, world, out, _fill(args, world, out), expected, inputs=(long_inputs,))
