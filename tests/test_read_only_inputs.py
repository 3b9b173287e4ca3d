"""Every command runs on inputs that cannot be written: the model, the teacher, the datasets
(CSV directories and datasets saved with ``save_to_disk``: classification, token classification,
QA), the recipe and an ONNX export all live on a read-only bind mount, are named by paths relative
to another working directory, and the outputs are relative too. A command that tried to write into
an input (a datasets cache file, a temporary file beside the model) fails here with EROFS.

Read-only bind mounts need root (and a kernel that allows them); the test skips elsewhere."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from ghostify.testing import tiny_checkpoint, write_toy_dataset, write_toy_ner_dataset, write_toy_squad_dataset

from .conftest import run_cli

TOY = ["--text-columns", "sentence", "--max-length", "32"]
NER = ["--tokens-column", "tokens", "--tags-column", "ner_tags", "--max-length", "32"]
QA = ["--question-column", "question", "--max-length", "32", "--doc-stride", "8"]
SHORT = ["--epochs", "1", "--batch-size", "8", "--max-samples", "16"]

RECIPE = """\
model: ../inputs/m
data: {dataset: ../inputs/toy, text_columns: [sentence], label_column: label, max_length: 32}
stages:
  - prune: {width: 0.5}
  - finetune: {epochs: 1, batch_size: 16, max_samples: 16}
  - eval: {}
"""


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "directory"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def read_only(tmp_path_factory) -> Path:
    """``<root>/inputs`` (read-only) beside ``<root>/work`` (the working directory, writable)."""
    root = tmp_path_factory.mktemp("read-only")
    source = root / "source"
    tiny_checkpoint(source / "m")
    tiny_checkpoint(source / "base", head="base")
    write_toy_dataset(source / "toy", train=32, validation=16)
    write_toy_ner_dataset(source / "ner", train=16, validation=8)
    write_toy_squad_dataset(source / "squad", train=12, validation=6)
    (source / "recipe.yaml").write_text(RECIPE)
    # an ONNX export among the inputs (bench and eval read it)
    from ghostify.steps import export

    export(source / "m", source / "onnx", format="onnx")
    inputs = root / "inputs"
    inputs.mkdir()
    (root / "work").mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(inputs)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(inputs)], capture_output=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remounted.stderr.decode().strip()}")
        with pytest.raises(OSError):
            (inputs / "probe").write_text("x")
        yield root
    finally:
        subprocess.run(["umount", "-l", str(inputs)], capture_output=True)


CASES = [
    ("info", ["info", "../inputs/m"]),
    ("bench", ["bench", "../inputs/m", "../inputs/onnx", "../inputs/onnx/model.onnx", "--rounds", "2",
                       "--warmup", "1", "--seq-len", "16"]),
    ("eval-csv", ["eval", "../inputs/m", "--dataset", "../inputs/toy", *TOY]),
    ("eval-onnx", ["eval", "../inputs/onnx/model.onnx", "--dataset", "../inputs/toy", *TOY]),
    ("importance", ["importance", "../inputs/m", "-o", "scored", "--dataset", "../inputs/toy", *TOY, "--samples", "8"]),
    ("prune-export-hf", ["prune", "../inputs/m", "-o", "pruned", "--width", "0.5"], ["export", "pruned", "-o", "hf"]),
    ("export-onnx", ["export", "../inputs/m", "-o", "onnx", "--format", "onnx", "--quantize", "int8"]),
    ("ner", ["finetune", "../inputs/base", "-o", "ner", "--dataset", "../inputs/ner", *NER, *SHORT],
     ["eval", "ner", "--dataset", "../inputs/ner", *NER],
     ["importance", "ner", "-o", "ner-scored", "--dataset", "../inputs/ner", *NER, "--samples", "8"]),
    ("qa", ["finetune", "../inputs/base", "-o", "qa", "--dataset", "../inputs/squad", *QA, *SHORT],
     ["eval", "qa", "--dataset", "../inputs/squad", *QA],
     ["importance", "qa", "-o", "qa-scored", "--dataset", "../inputs/squad", *QA, "--samples", "8"]),
    ("distill", ["prune", "../inputs/m", "-o", "student", "--width", "0.5"],
     ["distill", "--teacher", "../inputs/m", "--student", "student", "-o", "distilled", "--dataset", "../inputs/toy",
      *TOY, *SHORT]),
    ("run-recipe", ["run", "../inputs/recipe.yaml", "-o", "run"]),
]


@pytest.mark.parametrize("commands", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_commands_run_on_read_only_inputs_from_another_directory(commands, read_only, capsys, monkeypatch, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "inputs").symlink_to(read_only / "inputs")  # "../inputs" from the working directory
    before = _hashes(read_only / "source")
    monkeypatch.chdir(work)
    for args in commands:
        code, _, err = run_cli(capsys, *args)
        assert code == 0, f"{args[0]}: {err}"
        assert "error:" not in err, err
    assert _hashes(read_only / "source") == before
    outputs = [args[args.index("-o") + 1] for args in commands if "-o" in args]
    assert all((work / o).is_dir() for o in outputs), outputs
    assert not list(tmp_path.glob("inputs/*.tmp-*")) and not [p for p in work.iterdir() if ".tmp-" in p.name]
