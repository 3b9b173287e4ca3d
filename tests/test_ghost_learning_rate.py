"""``--ghost-learning-rate`` (issue 23): the ghost kernels and scales in their own AdamW group at their
own rate, on the same schedule; a part of the run's fingerprint; logged per group; the default
changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model
from ghostify.errors import GhostifyError
from ghostify.methods.ghost import GhostColumns, GhostConv, GhostMapConv
from ghostify.settings import TrainSettings
from ghostify.testing import tiny_checkpoint, write_toy_dataset
from ghostify.training.loop import parameter_groups

from .conftest import run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

TOY = {"text_columns": ("sentence",), "label_column": "label", "max_length": 32}
# 256 examples at batch 16: 16 optimizer steps an epoch
SHORT = {"epochs": 2, "batch_size": 16, "learning_rate": 1e-4}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=256, validation=32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny checkpoint, its pruned half, and that with the paper's ghosts (after O and FFN2)."""
    from ghostify.steps import attach_ghost, prune

    root = tmp_path_factory.mktemp("ghost-lr")
    plain = tiny_checkpoint(root / "plain")
    with pytest.warns(UserWarning):  # no importance scores: pruned by weight magnitude
        prune(plain, root / "pruned", width="0.5")
    attach_ghost(root / "pruned", root / "ghost")
    return root


def _finetune(source: Path, output: Path, toy: Path, **settings) -> Path:
    from ghostify.steps import finetune

    finetune(source, output, dataset=str(toy), **TOY, **{**SHORT, **settings})
    return output


def _applied_kernels(directory: Path) -> torch.Tensor:
    """Every ghost kernel as applied (softmax-normalised), flattened into one vector."""
    model = load_model(directory).eval()
    with torch.no_grad():
        return torch.cat([m.kernel().flatten() for m in model.modules() if isinstance(m, (GhostConv, GhostMapConv))])


def _relative_change(before: torch.Tensor, after: torch.Tensor) -> float:
    return float((after - before).norm() / before.norm())


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_model(directory).state_dict()


def _same_weights(a: Path, b: Path) -> bool:
    first, second = _weights(a), _weights(b)
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def _log_records(directory: Path) -> list[dict]:
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if "loss" in json.loads(line)]


# ---- (a) the kernels move ----------------------------------------------------------------------
def test_a_hundredfold_ghost_rate_moves_the_kernels_at_least_ten_times_further(models, toy, tmp_path):
    start = _applied_kernels(models / "ghost")
    default = _finetune(models / "ghost", tmp_path / "default", toy)
    fast = _finetune(models / "ghost", tmp_path / "fast", toy, ghost_learning_rate=100 * SHORT["learning_rate"])
    moved_default = _relative_change(start, _applied_kernels(default))
    moved_fast = _relative_change(start, _applied_kernels(fast))
    assert moved_default > 0
    assert moved_fast >= 10 * moved_default, (moved_default, moved_fast)
    # the rest of the model keeps its rate: it moves by about as much in both runs
    before, after_default, after_fast = _weights(models / "ghost"), _weights(default), _weights(fast)
    rest = [k for k in before if ".ghost." not in k]

    def flat(weights: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([weights[k].flatten() for k in rest])

    change = [_relative_change(flat(before), flat(after)) for after in (after_default, after_fast)]
    assert change[1] < 3 * change[0], change


# ---- the groups ----------------------------------------------------------------------------------
def test_parameter_groups(models):
    model = load_model(models / "ghost")
    params = list(model.parameters())
    kernels = [p for m in model.modules() if isinstance(m, GhostConv) for p in m.parameters(recurse=False)]
    assert kernels
    # default: one group, every trainable parameter in order (what AdamW(params) built before)
    (group,) = parameter_groups(model, params, TrainSettings())
    assert group["params"] is params and "lr" not in group and "weight_decay" not in group
    # a ghost rate: the kernels apart at their rate; decoupled decay per step kept (lr x decay)
    settings = TrainSettings(learning_rate=1e-4, ghost_learning_rate=1e-2, weight_decay=0.01)
    rest, ghosts = parameter_groups(model, params, settings)
    assert {id(p) for p in ghosts["params"]} == {id(p) for p in kernels}
    assert len(rest["params"]) + len(ghosts["params"]) == len(params)
    assert (rest["name"], ghosts["name"], ghosts["lr"]) == ("lr", "ghost_lr", 1e-2)
    assert ghosts["lr"] * ghosts["weight_decay"] == pytest.approx(1e-4 * 0.01)
    equal = TrainSettings(learning_rate=1e-4, ghost_learning_rate=1e-4, weight_decay=0.01)
    assert parameter_groups(model, params, equal)[1]["weight_decay"] == 0.01
    # frozen parameters stay out; ghost-only training: the one group is the ghosts'
    only = [p for p in params if any(p is k for k in kernels)]
    (group,) = parameter_groups(model, only, settings)
    assert group["name"] == "ghost_lr" and len(group["params"]) == len(kernels)
    # no ghost modules: one group whatever the setting
    plain = load_model(models / "pruned")
    (group,) = parameter_groups(plain, list(plain.parameters()), settings)
    assert group["name"] == "lr" and "lr" not in group


def test_ghost_head_columns_train_at_the_model_rate(models):
    """Position v's output columns are ordinary projection weights, not kernels: the model's group."""
    from ghostify.methods.ghost import GhostSettings, attach_ghosts

    model = load_model(models / "pruned")
    attach_ghosts(model, GhostSettings(positions=("v", "qk")))
    params = list(model.parameters())
    columns = {id(p) for m in model.modules() if isinstance(m, GhostColumns) for p in m.parameters()}
    maps = {id(p) for m in model.modules() if isinstance(m, GhostMapConv) for p in m.parameters()}
    assert columns and maps
    rest, ghosts = parameter_groups(model, params, TrainSettings(ghost_learning_rate=1e-3))
    assert columns <= {id(p) for p in rest["params"]}
    assert maps <= {id(p) for p in ghosts["params"]} and not columns & {id(p) for p in ghosts["params"]}


# ---- (b) resume, and the log --------------------------------------------------------------------
class _Crash(Exception):
    pass


def _crash_at(step: int):
    def on_step(current: int) -> None:
        if current == step:
            raise _Crash

    return on_step


def test_a_resumed_run_with_two_groups_equals_an_uninterrupted_one(models, toy, tmp_path):
    args = dict(ghost_learning_rate=1e-2, checkpoint_steps=5)
    whole = _finetune(models / "ghost", tmp_path / "whole", toy, **args)
    with pytest.raises(_Crash):
        _finetune(models / "ghost", tmp_path / "resumed", toy, on_step=_crash_at(17), **args)  # mid epoch 2
    assert (tmp_path / "resumed.partial" / "state").is_dir()
    _finetune(models / "ghost", tmp_path / "resumed", toy, resume=True, **args)
    assert _same_weights(whole, tmp_path / "resumed")
    assert (whole / "metrics.jsonl").read_text() == (tmp_path / "resumed" / "metrics.jsonl").read_text()
    # every log record has both groups' rates, on one schedule (linear decay from the peaks)
    records = _log_records(whole)
    assert [r["step"] for r in records] == [10, 20, 30]
    for record in records:
        assert record["ghost_lr"] == pytest.approx(100 * record["lr"])
        assert record["lr"] == pytest.approx(1e-4 * (1 - record["step"] / 32))
    training = json.loads((whole / "training.json").read_text())
    assert training["learning_rates"] == {"lr": 1e-4, "ghost_lr": 1e-2}
    assert training["settings"]["ghost_learning_rate"] == 1e-2


# ---- (e) the default changes nothing --------------------------------------------------------------
def test_the_default_is_one_group_and_equals_the_same_rate_in_two(models, toy, tmp_path):
    one = _finetune(models / "ghost", tmp_path / "one", toy, epochs=1)
    two = _finetune(models / "ghost", tmp_path / "two", toy, epochs=1, ghost_learning_rate=SHORT["learning_rate"])
    assert _same_weights(one, two)
    assert all("ghost_lr" not in r and r["lr"] > 0 for r in _log_records(one))
    assert all(r["ghost_lr"] == r["lr"] for r in _log_records(two))
    assert json.loads((one / "training.json").read_text())["learning_rates"] == {"lr": 1e-4}


def test_a_ghost_rate_without_ghost_modules_changes_nothing(models, toy, tmp_path, recwarn):
    plain = _finetune(models / "pruned", tmp_path / "plain", toy, epochs=1)
    rate = _finetune(models / "pruned", tmp_path / "rate", toy, epochs=1, ghost_learning_rate=1e-2)
    assert _same_weights(plain, rate)
    assert all("ghost_lr" not in r for r in _log_records(rate))
    assert not [w for w in recwarn if "ghost" in str(w.message).lower()]  # and no warning: recipes set it everywhere


# ---- (c) the one-line refusals --------------------------------------------------------------------
TRAIN = ["--dataset", "{toy}", "--text-columns", "sentence", "--max-length", "32"]
CASES: list[tuple[str, list[str], str]] = [
    ("finetune-ghost-rate-zero", ["finetune", "{ghost}", "-o", "{out}", *TRAIN, "--ghost-learning-rate", "0"],
     "--ghost-learning-rate 0.0 must be positive"),
    ("finetune-ghost-rate-negative", ["finetune", "{ghost}", "-o", "{out}", *TRAIN, "--ghost-learning-rate", "-1e-3"],
     "--ghost-learning-rate -0.001 must be positive (or unset: --learning-rate)"),
    ("distill-ghost-rate-negative", ["distill", "--teacher", "{m}", "--student", "{ghost}", "-o", "{out}", *TRAIN,
                                     "--ghost-learning-rate", "-2"], "--ghost-learning-rate -2.0 must be positive"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_ghost_learning_rate_is_one_line(name, args, expected, world, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(args, world, out), expected)


def test_resuming_with_another_ghost_rate_is_refused_in_one_line(world, tmp_path, capsys):  # noqa: F811
    from ghostify.steps import finetune

    out = tmp_path / "out"
    with pytest.raises(_Crash):
        finetune(world / "ghost", out, dataset=str(world / "toy"), text_columns=("sentence",), max_length=32,
                 epochs=1, batch_size=16, checkpoint_steps=1, ghost_learning_rate=0.01, on_step=_crash_at(1))
    partial = tmp_path / "out.partial"
    assert (partial / "state").is_dir()
    args = ["finetune", "{ghost}", "-o", "{out}", *TRAIN, "--epochs", "1", "--batch-size", "16",
            "--checkpoint-steps", "1", "--resume"]
    _check_refused(capsys, world, out, _fill([*args, "--ghost-learning-rate", "0.02"], world, out),
                   "other settings or inputs (--ghost-learning-rate was 0.01, now 0.02); resume it with the same",
                   inputs=(partial,))
    _check_refused(capsys, world, out, _fill(args, world, out),
                   "(--ghost-learning-rate was 0.01, now unset)", inputs=(partial,))
    # the same rate resumes it
    code, _, err = run_cli(capsys, *_fill([*args, "--ghost-learning-rate", "0.01"], world, out))
    assert code == 0, err
    assert "ghost_lr 0.01" in err and not partial.exists()


# ---- (d) one setting: flag, recipe key, keyword ---------------------------------------------------
@pytest.mark.parametrize("command", ["finetune", "distill"])
def test_the_flag_is_in_the_help(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0 and "--ghost-learning-rate" in out


def test_the_recipe_key(tmp_path):
    from ghostify.recipe.run import load
    from ghostify.recipe.schema import RecipeError, accepts

    assert accepts("finetune", "ghost_learning_rate") and accepts("distill", "ghost_learning_rate")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: some/model\nstages:\n  - prune: {width: 0.5}\n  - attach-ghost: {}\n"
                      "  - finetune: {task: sst2, ghost_learning_rate: 0.002}\n")
    stage = load(recipe).stages[-1]
    assert stage.settings["ghost_learning_rate"] == 0.002
    recipe.write_text(recipe.read_text().replace("0.002", "fast"))
    with pytest.raises(RecipeError, match="ghost_learning_rate"):
        load(recipe)


def test_the_python_keyword_is_validated_before_anything_runs(models, toy, tmp_path):
    with pytest.raises(GhostifyError, match="--ghost-learning-rate -1.0 must be positive"):
        _finetune(models / "ghost", tmp_path / "out", toy, ghost_learning_rate=-1.0)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
