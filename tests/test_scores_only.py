"""Issue 24, disk: `importance` adds its scores beside the weights it scored without copying them
(a hard link of the input's weights file, a copy only where the file system refuses a link), and
never changes the input, not even its permissions."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ghostify import recipe as recipes
from ghostify.steps import importance, prune
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import REPO, built_once

DATA = dict(dataset=None, text_columns=("sentence",), label_column="label", max_length=32, samples=16)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Path:
    """The quickstart recipe, run on a tiny model and the toy dataset (shared with test_report_plot and
    test_docs), once per test run."""
    return built_once(tmp_path_factory, "quick-tiny", _quick_run) / "run"


def _quick_run(root: Path) -> None:
    tiny_checkpoint(root / "model")
    write_toy_dataset(root / "toy", train=64, validation=32)
    overrides = [f"model={root / 'model'}", f"data.dataset={root / 'toy'}", "data.task=null",
                 "data.text_columns=[sentence]", "data.label_column=label", "data.max_length=32",
                 "importance.samples=16", *[f"{c}.{s}" for c in ("finetune", "distill")
                                            for s in ("max_samples=32", "epochs=1", "batch_size=16")]]
    recipes.run(recipes.load(REPO / "recipes" / "quickstart.yaml", overrides), root / "run")


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("scores")
    toy = write_toy_dataset(root / "toy", train=32, validation=16)
    with pytest.warns(UserWarning):  # data-free pruning: a ghostify-written checkpoint to score
        prune(tiny_checkpoint(root / "m"), root / "pruned", width="0.5")
    return root, toy


def _inode(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def test_importance_links_the_weights_it_scored_and_leaves_the_input_alone(scored):
    root, toy = scored
    weights = root / "pruned" / "model.safetensors"
    os.chmod(weights, 0o440)  # a read-only input: the output's umask must not reach it through the link
    before = weights.read_bytes()
    importance(root / "pruned", root / "scored", **{**DATA, "dataset": str(toy)})
    assert _inode(root / "scored" / "model.safetensors") == _inode(weights)
    assert weights.stat().st_mode & 0o777 == 0o440 and weights.read_bytes() == before
    assert (root / "scored" / "importance.safetensors").is_file()
    # `prune SCORED_DIR` and `prune MODEL --importance SCORED_DIR` read the same scores
    a = prune(root / "scored", root / "a", width="0.5")
    b = prune(root / "pruned", root / "b", width="0.5", importance=root / "scored")
    assert a.heads == b.heads and a.ffn == b.ffn


def test_importance_copies_where_no_link_can_be_made(scored, monkeypatch):
    root, toy = scored

    def refuse(src, dst, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    importance(root / "pruned", root / "copied", **{**DATA, "dataset": str(toy)})
    copied, source = root / "copied" / "model.safetensors", root / "pruned" / "model.safetensors"
    assert _inode(copied) != _inode(source) and copied.read_bytes() == source.read_bytes()


def test_quickstart_importance_stage_writes_no_second_copy_of_the_weights(quick_run):
    teacher, scored_dir = quick_run / "01-teacher", quick_run / "02-importance"
    assert _inode(scored_dir / "model.safetensors") == _inode(teacher / "model.safetensors")
    files = [p for p in quick_run.rglob("*") if p.is_file()]
    apparent = sum(p.stat().st_size for p in files)
    on_disk = sum({_inode(p): p.stat().st_size for p in files}.values())
    # before, the importance stage held its own copy: the run now writes that much less
    assert on_disk <= apparent - (teacher / "model.safetensors").stat().st_size
