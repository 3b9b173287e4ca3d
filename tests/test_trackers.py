"""``--report-to``: Accelerate's experiment trackers, logged into the output (``OUT/runs/``), read back
with TensorBoard's own reader; a resumed run ends with the same weights and one loss per step; an
unknown or missing tracker is one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ghostify import load_model
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .test_bad_input import _check_refused, _fill, world  # noqa: F401

TOY = {"text_columns": ("sentence",), "label_column": "label"}
ARGS = {**TOY, "epochs": 2, "batch_size": 16, "learning_rate": 3e-3, "checkpoint_steps": 4, "max_length": 32}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=128, validation=32)


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


class _Crash(Exception):
    pass


def _crash_at(step: int):
    def on_step(current: int) -> None:
        if current == step:
            raise _Crash()

    return on_step


def test_tensorboard_logs_land_in_the_output_and_survive_a_resume(tmp_path, toy):
    from ghostify.steps import finetune

    tiny_checkpoint(tmp_path / "init")
    args = {"dataset": str(toy), **ARGS, "report_to": "tensorboard"}  # the flat keyword, as a flag would give it
    finetune(tmp_path / "init", tmp_path / "whole", **args)
    run = tmp_path / "whole" / "runs" / "finetune"
    scalars = _scalars(run)
    steps = [step for step, _ in scalars["train/loss"]]
    assert steps == [10]  # every log_steps (10) of 16 steps, as metrics.jsonl
    assert {"train/lr", "eval/accuracy"} <= set(scalars)
    assert [step for step, _ in scalars["eval/accuracy"]] == [8, 16]
    assert not (tmp_path / "whole.partial").exists()

    with pytest.raises(_Crash):  # killed at step 11: step 10 was logged after the last saved state (8)
        finetune(tmp_path / "init", tmp_path / "resumed", on_step=_crash_at(11), **args)
    assert (tmp_path / "resumed.partial" / "runs" / "finetune").is_dir() and not (tmp_path / "resumed").exists()
    finetune(tmp_path / "init", tmp_path / "resumed", resume=True, **args)
    whole, resumed = load_model(tmp_path / "whole").state_dict(), load_model(tmp_path / "resumed").state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)  # trackers change nothing of the training
    again = _scalars(tmp_path / "resumed" / "runs" / "finetune")
    assert [step for step, _ in again["eval/accuracy"]] == [8, 16]  # step 8's from before the kill, 16's after
    # step 10 was logged twice (before the kill and after the resume from step 8): shown once
    assert [step for step, _ in again["train/loss"]] == [10]
    assert again["train/loss"][0][1] == pytest.approx(scalars["train/loss"][0][1])


def test_the_report_to_setting_is_a_recipe_key(tmp_path):
    from ghostify.recipe import load

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: m\ndata:\n  dataset: d\n  task: sst2\nstages:\n"
                      "  - finetune:\n      report_to: [tensorboard]\n")
    assert list(load(recipe).stages[0].settings["report_to"]) == ["tensorboard"]


def _case(name: str, args: list[str], expected: str, missing: str | None = None):
    marks = [pytest.mark.skipif(importlib.util.find_spec(missing) is not None, reason=f"{missing} is installed here")] \
        if missing else []
    return pytest.param(name, args, expected, id=name, marks=marks)


TRAIN = ["--dataset", "{toy}", "--text-columns", "sentence", "--max-length", "32"]
CASES = [
    _case("report-to-unknown", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "neptune"],
          "--report-to 'neptune': choose one or more of tensorboard, wandb, mlflow"),
    _case("report-to-unknown-in-a-list", ["distill", "--teacher", "{m}", "--student", "{m}", "-o", "{out}", *TRAIN,
                                          "--report-to", "tensorboard,tensorbord"], "--report-to 'tensorbord'"),
    _case("report-to-wandb-missing", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "wandb"],
          "needs the wandb package, which is not installed: pip install wandb", missing="wandb"),
    _case("report-to-mlflow-missing", ["distill", "--teacher", "{m}", "--student", "{m}", "-o", "{out}", *TRAIN,
                                       "--report-to", "mlflow"],
          "needs the mlflow package, which is not installed: pip install mlflow", missing="mlflow"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES)
def test_a_bad_tracker_is_one_line_and_changes_nothing(name, args, expected, world, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(args, world, out), expected)
