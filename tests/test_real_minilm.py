"""importance -> prune -> reload on the real all-MiniLM-L6-v2 with GLUE sst2 (a few hundred samples)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model
from ghostify.methods.pruning import ImportanceScores, rearrange
from ghostify.steps.common import load_tokenizer

from .conftest import run_cli

pytestmark = pytest.mark.real


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def test_importance_prune_reload(minilm, glue, tmp_path, capsys):
    before = _digest(minilm)
    code, _, err = run_cli(capsys, "importance", minilm, "-o", tmp_path / "scored", "--dataset", glue,
                           "--task", "sst2", "--samples", "192", "--batch-size", "32")
    assert code == 0, err
    assert "no trained classification head" in err  # MiniLM is a bare encoder: said once, plainly
    scores = ImportanceScores.load(tmp_path / "scored")
    meta = scores.metadata
    assert meta["split"] == "train" and meta["samples"] == 192 and meta["task"] == "sst2" and len(meta["sha256"]) == 64
    assert [t.numel() for t in scores.heads] == [12] * 6 and [t.numel() for t in scores.ffn] == [1536] * 6
    assert all(t.sum() > 0 for t in scores.heads + scores.ffn)

    code, _, err = run_cli(capsys, "prune", tmp_path / "scored", "-o", tmp_path / "first-order", "--width", "6/12",
                           "--criterion", "loss-gradient", "--no-rearrange")
    assert code == 0, err
    assert "weight magnitude" not in err  # used the scores in the directory
    first_order = json.loads((tmp_path / "first-order" / "config.json").read_text())["ghostify"]["heads"]
    for kept, layer_scores in zip(first_order, scores.heads):
        assert kept == torch.argsort(layer_scores, descending=True, stable=True)[:6].tolist()  # top 6, by importance

    # the Fisher information, each layer's choice rearranged by its block (never worse than the top 6)
    code, _, err = run_cli(capsys, "prune", tmp_path / "scored", "-o", tmp_path / "pruned", "--width", "6/12", "--rearrange")
    assert code == 0, err
    pruned = load_model(tmp_path / "pruned")
    assert [len(h) for h in pruned.config.ghostify["heads"]] == [6] * 6
    for kept, diagonal, factor in zip(pruned.config.ghostify["heads"], scores.fisher.heads, scores.fisher.head_factors):
        block = rearrange.gram(factor)
        top = torch.argsort(diagonal, descending=True, stable=True)[:6].tolist()
        removed = lambda keep: [u for u in range(12) if u not in keep]  # noqa: E731
        assert rearrange.objective(block, removed(kept)) <= rearrange.objective(block, removed(top)) * (1 + 1e-9)

    tokenizer = load_tokenizer(tmp_path / "pruned")
    batch = tokenizer(["a gripping , funny film .", "dull"], padding=True, return_tensors="pt")
    again = load_model(tmp_path / "pruned")
    assert torch.equal(again(**batch).last_hidden_state, pruned(**batch).last_hidden_state)
    assert _digest(minilm) == before  # the input checkpoint was not touched


def test_dataset_without_labels_suggests_label_free(minilm, tmp_path, capsys):
    data = tmp_path / "unlabeled"
    data.mkdir()
    (data / "train.csv").write_text("text\n" + "\n".join(f"sample sentence number {i}" for i in range(40)) + "\n")
    args = ["importance", minilm, "-o", tmp_path / "s", "--dataset", data, "--text-columns", "text", "--samples", "16"]
    code, _, err = run_cli(capsys, *args)
    assert code != 0 and "--label-free" in err.strip().splitlines()[-1]
    code, _, err = run_cli(capsys, *args, "--label-free")
    assert code == 0, err
    assert ImportanceScores.load(tmp_path / "s").metadata["label_free"] is True
