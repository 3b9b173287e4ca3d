"""Retraining-free pruning refused in one line (issue 48), with the harness of ``tests/test_bad_input.py``: scores
that are damaged (a NaN, an infinite or a negative value, on whichever path reads them: ``--width``, ``--speedup``,
``--rearrange``'s Fisher blocks, ``drop-layers``, ``prune-hidden``), and mask tuning on data it cannot use (another
task's, a model without the head the task compares, data that is gone, too few examples). Each was checked first:
a NaN block pruned silently with a NaN objective in the history, another task's data leaked `unexpected IndexError`,
and data that was gone said "check --dataset" to a command that takes none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest
import torch

from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS, tiny_checkpoint, write_toy_ner_dataset

from .test_bad_input import _check_refused, _fill, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")

SCORES = "importance.safetensors"


def _tensors(edit: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    """Damage a scores file's tensors (its metadata kept)."""
    def apply(directory: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import save_file

        path = directory / SCORES
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        edit(tensors)
        save_file(tensors, str(path), metadata=metadata)

    return apply


def _data(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    """Edit what a scores file records of its data (``metadata["data"]``)."""
    def apply(directory: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import save_file

        path = directory / SCORES
        with safe_open(str(path), framework="pt") as f:
            metadata = json.loads(f.metadata()["ghostify"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        edit(metadata)
        save_file(tensors, str(path), metadata={"ghostify": json.dumps(metadata)})

    return apply


def _set(name: str, index: tuple, value: float) -> Callable[[Path], None]:
    return _tensors(lambda t: t[name].__setitem__(index, value))


#: damaged copies of the scores of the world's classifier (each a checkpoint directory, as `importance` writes it)
DAMAGES: dict[str, Callable[[Path], None]] = {
    "nan-head-block": _set("fisher.factor.heads.0", (0, 0), float("nan")),
    "inf-neuron-block": _set("fisher.factor.ffn.1", (0, 3), float("inf")),
    "nan-fisher-heads": _set("fisher.heads.1", (2,), float("nan")),
    "negative-first-order": _set("heads.0", (1,), -1.0),
    "inf-ffn": _set("ffn.1", (3,), float("inf")),
    "nan-layers": _set("layers", (0,), float("nan")),
    "negative-fisher-layers": _set("fisher.layers", (1,), -0.5),
    "nan-channels": _set("hidden", (5,), float("nan")),
    "negative-activation": _set("activation.hidden", (2,), -1.0),
    "data-gone": _data(lambda m: m["data"]["data"].__setitem__("dataset", "/nonexistent/toy")),
    "data-unknown-task": _data(lambda m: m["data"]["data"].__setitem__("task", "sst3")),
    "data-other-column": _data(lambda m: m["data"]["data"].__setitem__("text_columns", ["sentense"])),
    "data-not-a-mapping": _data(lambda m: m.__setitem__("data", {"data": 5})),
}


@pytest.fixture(scope="session")
def scores(world, tmp_path_factory) -> Path:  # noqa: F811
    """``good``: the world's classifier scored on its toy data (32 training rows); its damaged copies; ``ner``: the
    same classifier scored on a token-classification dataset; ``bare``: an encoder without a head, scored on the
    sentences; ``latency``: a latency model of the tiny shape."""
    from ghostify import steps

    root = tmp_path_factory.mktemp("pruning-scores")
    toy = dict(dataset=str(world / "toy"), text_columns=("sentence",), label_column="label", max_length=32, samples=16)
    steps.importance(world / "m", root / "good", **toy)
    for name, damage in DAMAGES.items():
        shutil.copytree(root / "good", root / name)
        damage(root / name)
    ner = write_toy_ner_dataset(root / "ner-data", train=16, validation=8)
    steps.importance(world / "m", root / "ner", dataset=str(ner), tokens_column="tokens", tags_column="ner_tags",
                     max_length=32, samples=16)
    tiny_checkpoint(root / "bare-model", head="base")
    steps.importance(root / "bare-model", root / "bare", **toy, label_free=True)
    (root / "latency").mkdir()
    LatencyModel(geometry=Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS), deployment=Deployment(), machine="test",
                 base_ms=0.5, layer_ms=0.25, head_ms=0.25, neuron_ms=0.02).save(root / "latency" / "latency.json")
    return root


NOT_FINITE = "hold NaN or infinite values"
DAMAGED = "hold negative, NaN or infinite values"
TUNE = ["--width", "0.5", "--tune-masks", "32"]
CASES: list[tuple[str, list[str], str]] = [
    # damaged scores, on every path that reads them (the file is checked whole when it is read)
    ("nan-block-width-rearrange", ["prune", "<nan-head-block>", "-o", "{out}", "--width", "0.5", "--rearrange"],
     f"fisher.factor.heads.0 in <nan-head-block>/{SCORES} {NOT_FINITE} (nan at [0, 0])"),
    ("nan-block-width", ["prune", "<nan-head-block>", "-o", "{out}", "--width", "0.5"], f"{NOT_FINITE} (nan at [0, 0])"),
    ("nan-block-speedup", ["prune", "<nan-head-block>", "-o", "{out}", "--speedup", "2", "--latency", "<latency>",
                           "--rearrange"], "fisher.factor.heads.0"),
    ("inf-neuron-block-rearrange", ["prune", "<inf-neuron-block>", "-o", "{out}", "--width", "0.5", "--rearrange"],
     f"fisher.factor.ffn.1 in <inf-neuron-block>/{SCORES} {NOT_FINITE} (inf at [0, 3])"),
    ("nan-fisher-heads-speedup", ["prune", "<nan-fisher-heads>", "-o", "{out}", "--speedup", "2", "--latency",
                                  "<latency>"], f"fisher.heads.1 in <nan-fisher-heads>/{SCORES} {DAMAGED} (nan at [2])"),
    ("nan-fisher-heads-width", ["prune", "<nan-fisher-heads>", "-o", "{out}", "--width", "3/4"], "fisher.heads.1"),
    ("negative-first-order-width", ["prune", "<negative-first-order>", "-o", "{out}", "--width", "0.5", "--criterion",
                                    "loss-gradient"], f"heads.0 in <negative-first-order>/{SCORES} {DAMAGED} (-1 at [1])"),
    ("inf-ffn-global", ["prune", "<inf-ffn>", "-o", "{out}", "--width", "0.5", "--allocation", "global"],
     f"ffn.1 in <inf-ffn>/{SCORES} {DAMAGED} (inf at [3])"),
    ("scores-by-importance-flag", ["prune", "{m}", "-o", "{out}", "--width", "0.5", "--importance", "<inf-ffn>"],
     f"ffn.1 in <inf-ffn>/{SCORES}"),
    ("nan-layers-drop-layers", ["drop-layers", "<nan-layers>", "-o", "{out}", "--keep", "1", "--criterion",
                                "loss-gradient"], f"layers in <nan-layers>/{SCORES} {DAMAGED} (nan at [0])"),
    ("negative-fisher-layers-drop-layers", ["drop-layers", "<negative-fisher-layers>", "-o", "{out}", "--keep", "1"],
     f"fisher.layers in <negative-fisher-layers>/{SCORES} {DAMAGED} (-0.5 at [1])"),
    ("nan-channels-prune-hidden", ["prune-hidden", "<nan-channels>", "-o", "{out}", "--hidden-width", "0.5"],
     f"hidden in <nan-channels>/{SCORES} {DAMAGED} (nan at [5])"),
    ("negative-activation-prune-hidden", ["prune-hidden", "<negative-activation>", "-o", "{out}", "--hidden-width",
                                          "0.5", "--criterion", "activation"], f"activation.hidden in <negative-activation>"),
    # mask tuning on data it cannot use
    ("tune-on-another-tasks-data", ["prune", "<ner>", "-o", "{out}", *TUNE],
     "(tokens: it compares the outputs of a token-classification head), but <ner> has a sequence-classification head"),
    ("tune-a-bare-encoder", ["prune", "<bare>", "-o", "{out}", *TUNE],
     "(classification: it compares the outputs of a sequence-classification head), but <bare> has no task head"),
    ("tune-speedup-on-another-tasks-data", ["prune", "<ner>", "-o", "{out}", "--speedup", "2", "--latency", "<latency>",
                                            "--tune-masks", "32"], "but <ner> has a sequence-classification head"),
    ("tune-data-gone", ["prune", "<data-gone>", "-o", "{out}", *TUNE],
     "--tune-masks reads the data the scores were computed on, as `ghostify importance` recorded it, and cannot: "
     "dataset directory /nonexistent/toy does not exist"),
    ("tune-data-unknown-task", ["prune", "<data-unknown-task>", "-o", "{out}", *TUNE], "and cannot: unknown task 'sst3'"),
    ("tune-data-other-column", ["prune", "<data-other-column>", "-o", "{out}", *TUNE], "no column 'sentense'"),
    ("tune-data-not-a-mapping", ["prune", "<data-not-a-mapping>", "-o", "{out}", *TUNE],
     "the scores file describes its data as {'data': 5}, which this ghostify cannot read"),
    ("tune-more-than-the-data-has", ["prune", "<good>", "-o", "{out}", "--width", "0.5", "--tune-masks", "256"],
     "--tune-masks 256 found 32 training example(s) in the scores' data; it needs at least two batches (one held out "
     "to check the scales): ask for --tune-masks 32"),
    ("tune-without-scores", ["prune", "{m}", "-o", "{out}", *TUNE], "weight-magnitude does not say which"),
    ("tune-masks-negative", ["prune", "<good>", "-o", "{out}", "--width", "0.5", "--tune-masks", "-3"],
     "--tune-masks -3 must be a whole number of examples"),
]


def _fill_scores(args: list[str], root: Path) -> list[str]:
    return [a.replace("<", f"{root}/").replace(">", "") for a in args]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_retraining_free_pruning_refuses_in_one_line(name, args, expected, world, scores, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(_fill_scores(args, scores), world, out), _fill_scores([expected], scores)[0],
                   inputs=(scores,))


def test_the_undamaged_scores_prune_tune_and_drop(world, scores, tmp_path, capsys):  # noqa: F811
    """The cases fail for their damage: the scores they were copied from prune (rearranged, tuned on what the data
    has), drop layers and cut channels."""
    from .conftest import run_cli

    good = scores / "good"
    for args in (["prune", good, "-o", tmp_path / "a", "--width", "0.5", "--rearrange", "--tune-masks", "32"],
                 ["prune", good, "-o", tmp_path / "b", "--speedup", "2", "--latency", scores / "latency"],
                 ["drop-layers", good, "-o", tmp_path / "c", "--keep", "1"],
                 ["prune-hidden", good, "-o", tmp_path / "d", "--hidden-width", "0.5"]):
        code, _, err = run_cli(capsys, *args)
        assert code == 0, (args, err)
    history = json.loads((tmp_path / "a" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    assert history["rearranged"]["heads"]["after"] == history["rearranged"]["heads"]["after"]  # a number, not NaN
    assert history["tuned"]["examples"] == 32
