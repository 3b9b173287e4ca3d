"""Same inputs and seed, same weights: every command run twice writes bit-identical tensors.

Each pair of runs starts from a different global RNG state (``torch.manual_seed(100 + run)``), so
a random initialisation that the command does not seed itself (a new task head, a distillation
projection, a ghost kernel, a reference map) shows up as a difference."""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from ghostify import recipe as recipes
from ghostify import steps
from ghostify.testing import TOY_WORDS, tiny_checkpoint, tiny_model, tiny_tokenizer, write_toy_dataset

from .conftest import ALL_FAMILIES, REPO, family_params

TOY = {"text_columns": ("sentence",), "label_column": "label"}
SHORT = {"epochs": 1, "batch_size": 16, "max_samples": 32, "learning_rate": 1e-3, "max_length": 32}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=64, validation=16)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Sentence pairs, for sentence-order prediction."""
    directory = tmp_path_factory.mktemp("pairs") / "data"
    directory.mkdir()
    rng = random.Random(0)
    for split, n in (("train", 48), ("validation", 16)):
        with (directory / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["first", "second", "label"])
            for _ in range(n):
                writer.writerow([" ".join(rng.choices(TOY_WORDS, k=5)), " ".join(rng.choices(TOY_WORDS, k=4)), rng.randint(0, 1)])
    return directory


def tensors(directory: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every tensor of every safetensors file in a checkpoint directory."""
    files = sorted(directory.glob("*.safetensors"))
    assert files, f"no weights in {directory}"
    return {f.name: load_file(str(f)) for f in files}


def assert_identical(a: Path, b: Path) -> None:
    first, second = tensors(a), tensors(b)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name].keys() == second[name].keys(), name
        different = [k for k in first[name] if not torch.equal(first[name][k], second[name][k])]
        assert not different, f"{name}: {len(different)} tensors differ between two runs, e.g. {different[:3]}"
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name}: same tensors, different bytes"


def twice(tmp_path: Path, command) -> tuple[Path, Path]:
    """Run ``command(output)`` into two directories, each from another global RNG state."""
    outputs = []
    for run in range(2):
        torch.manual_seed(100 + run)
        random.seed(100 + run)
        out = tmp_path / f"run{run}"
        command(out)
        outputs.append(out)
    return outputs[0], outputs[1]


@pytest.mark.parametrize("family", family_params(ALL_FAMILIES, ["bert"]))
def test_the_ghostbert_chain_is_reproducible_for_every_family(tmp_path, toy, family):
    """finetune (new head) -> importance -> prune -> attach-ghost (F=2: random kernels) -> distill
    -> finetune with the teacher: each stage's output is identical between two runs."""
    tiny_checkpoint(tmp_path / "bare", family, head="base")

    def chain(root: Path) -> None:
        steps.finetune(tmp_path / "bare", root / "teacher", dataset=str(toy), **TOY, **SHORT, seed=3)
        steps.importance(root / "teacher", root / "scored", dataset=str(toy), **TOY, samples=16, max_length=32, seed=3)
        steps.prune(root / "scored", root / "pruned", width=0.5)
        steps.attach_ghost(root / "pruned", root / "ghost", features=2, seed=3)
        steps.distill(root / "teacher", root / "ghost", root / "distilled", dataset=str(toy), **TOY, **SHORT,
                      logit_weight=1.0, seed=3)
        steps.finetune(root / "distilled", root / "final", dataset=str(toy), **TOY, **SHORT, teacher=root / "teacher",
                       teacher_weight=0.5, seed=3)

    a, b = twice(tmp_path, chain)
    for stage in ("teacher", "scored", "pruned", "ghost", "distilled", "final"):
        assert_identical(a / stage, b / stage)


def test_importance_of_a_bare_encoder_is_reproducible(tmp_path, toy):
    """Scores through a freshly drawn classification head, and label-free sampling."""
    tiny_checkpoint(tmp_path / "bare", head="base")
    for label_free in (False, True):
        a, b = twice(tmp_path / str(label_free), lambda out: steps.importance(
            tmp_path / "bare", out, dataset=str(toy), **TOY, samples=16, max_length=32, label_free=label_free, seed=5))
        assert_identical(a, b)


def test_another_seed_gives_another_model(tmp_path, toy):
    """The seed is what decides: a check that the comparisons above can fail."""
    tiny_checkpoint(tmp_path / "bare", head="base")
    steps.finetune(tmp_path / "bare", tmp_path / "a", dataset=str(toy), **TOY, **SHORT, seed=1)
    steps.finetune(tmp_path / "bare", tmp_path / "b", dataset=str(toy), **TOY, **SHORT, seed=2)
    first, second = tensors(tmp_path / "a")["model.safetensors"], tensors(tmp_path / "b")["model.safetensors"]
    assert not torch.equal(first["classifier.weight"], second["classifier.weight"])


def test_ghost_kernels_follow_the_seed(tmp_path):
    tiny_checkpoint(tmp_path / "m")
    a, b = twice(tmp_path, lambda out: steps.attach_ghost(tmp_path / "m", out, features=3, per_head=True, seed=7))
    assert_identical(a, b)
    steps.attach_ghost(tmp_path / "m", tmp_path / "other", features=3, per_head=True, seed=8)
    kernels = {k: v for k, v in tensors(a)["model.safetensors"].items() if "ghost" in k}
    other = tensors(tmp_path / "other")["model.safetensors"]
    assert kernels and any(not torch.equal(v, other[k]) for k, v in kernels.items())


def test_distill_projections_sop_and_reference_map_are_reproducible(tmp_path, pairs):
    """A narrower student: hidden-size projections, the SOP classifier and the reference map are
    all drawn at the start of the command."""
    tiny_checkpoint(tmp_path / "teacher", seed=1)
    tiny_checkpoint(tmp_path / "student", seed=2, hidden_size=16, intermediate_size=20)
    columns = {"text_columns": ("first", "second"), "label_column": "label"}
    for options in ({"sop_weight": 1.0, "attention_weight": 1.0}, {"references": True}):
        name = "-".join(options)
        a, b = twice(tmp_path / name, lambda out: steps.distill(
            tmp_path / "teacher", tmp_path / "student", out, dataset=str(pairs), **columns, **SHORT, seed=4, **options))
        assert_identical(a, b)
        assert "distill_projections.safetensors" in tensors(a) or "references.safetensors" in tensors(a)


def test_structural_commands_are_reproducible(tmp_path):
    tiny_checkpoint(tmp_path / "m", num_hidden_layers=4)
    for name, command in {
        "group-linear": lambda out: steps.group_linear(tmp_path / "m", out, groups=2, modules="qkv,o"),
        "factorize": lambda out: steps.factorize_embeddings(tmp_path / "m", out, rank=8),
        "share": lambda out: steps.share_layers(tmp_path / "m", out, groups=2),
        "prune-magnitude": lambda out: steps.prune(tmp_path / "m", out, width=0.5),
    }.items():
        a, b = twice(tmp_path / name, command)
        assert_identical(a, b)


def test_augment_writes_the_same_dataset(tmp_path, toy):
    mlm = tiny_model("bert", "masked-lm")
    mlm.save_pretrained(tmp_path / "mlm")
    tiny_tokenizer(tmp_path / "mlm")
    a, b = twice(tmp_path, lambda out: steps.augment(tmp_path / "mlm", out, dataset=str(toy), **TOY, max_samples=8,
                                                      per_example=2, seed=2))
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


RECIPE = """
model: {model}
teacher: ${{teacher}}
data: {{dataset: {data}, text_columns: [sentence], label_column: label, max_length: 32}}
seed: 11
stages:
  - finetune: {{output: teacher, max_samples: 32, epochs: 1, batch_size: 16, learning_rate: 1.0e-3}}
  - importance: {{samples: 16}}
  - prune: {{width: 0.5}}
  - attach-ghost: {{features: 2}}
  - distill: {{max_samples: 32, epochs: 1, batch_size: 16, learning_rate: 1.0e-3}}
  - finetune: {{output: final, teacher: '${{teacher}}', teacher_weight: 0.5, max_samples: 32, epochs: 1, batch_size: 16}}
"""


@pytest.mark.slow  # the full run (the same bytes twice daily in test_compress_stages' time-budget test)
def test_a_recipe_run_twice_in_fresh_processes_gives_the_same_model(tmp_path, toy):
    """What a user does: `ghostify run` twice, each a new process, into two run directories."""
    tiny_checkpoint(tmp_path / "bare", head="base")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(model=tmp_path / "bare", data=toy))
    assert recipes.load(recipe).stages  # valid before it runs
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for run in ("a", "b"):
        result = subprocess.run([sys.executable, "-m", "ghostify", "run", str(recipe), "-o", str(tmp_path / run)],
                                capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
        assert result.returncode == 0, result.stderr
    stages = sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir())
    assert stages[-1].endswith("final") and len(stages) == len(yaml.safe_load(recipe.read_text())["stages"])
    for stage in stages:
        assert_identical(tmp_path / "a" / stage, tmp_path / "b" / stage)
