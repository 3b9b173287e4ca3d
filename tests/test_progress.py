"""What training says while it runs and when it ends: progress lines without a terminal (the
interval on a fake clock), one line per evaluation, where the outputs are, the process count, the
constant-baseline warning, and each line once under a two-process launch."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
import torch

from ghostify.testing import tiny_checkpoint, write_toy_dataset
from ghostify.training.baseline import constant_baseline
from ghostify.training.progress import Interval, TrainingProgress, duration

from .conftest import run_cli, run_process

STEP_LINE = re.compile(r"^step \d+/\d+ \(\d+%\) loss [\d.e+-]+ lr [\d.e+-]+ [\d.]+ samples/s ETA \w+$")
EVAL_LINE = re.compile(r"^eval step \d+: accuracy [\d.]+( \(best\))?$")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=256, validation=64)


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("init") / "init")


def _finetune_args(init, toy, out, *extra: str) -> list[str]:
    return ["finetune", str(init), "-o", str(out), "--dataset", str(toy), "--text-columns", "sentence",
            "--batch-size", "16", *extra]


# ---- the interval and the lines, on a fake clock ------------------------------------------------
def test_interval_is_due_every_n_steps_or_every_minute_whichever_comes_first():
    clock = FakeClock()
    interval = Interval(10, 60.0, clock=clock)
    assert [s for s in range(1, 31) if interval.due(s)] == [10, 20, 30]  # fast steps: every 10
    clock.now = 59.0
    assert not interval.due(31)
    clock.now = 90.0
    assert interval.due(32)  # a minute since step 30's line, only 2 steps later
    clock.now = 100.0
    assert not interval.due(41) and interval.due(42)  # counted from step 32, where it was last due
    resumed = Interval(10, 60.0, start=100, clock=clock)
    assert not resumed.due(109) and resumed.due(110)


def test_duration():
    assert [duration(s) for s in (0, 35.4, 252, 3900)] == ["0s", "35s", "4m12s", "1h05m"]


def test_lines_without_a_terminal():
    clock, lines = FakeClock(), []
    shown = TrainingProgress("finetune", 20, 0, 32, terminal=False, clock=clock, write=lines.append)
    for step in range(1, 21):
        clock.now += 2.0  # 16 samples/s
        shown.step(step, loss=1.0 if step <= 2 else 0.5, learning_rate=2e-5 * (1 - step / 20))
    assert lines[0] == "step 2/20 (10%) loss 1 lr 1.8e-05 16.0 samples/s ETA 36s"  # a tenth of the run
    assert lines[1].startswith("step 4/20 (20%) loss 0.5 lr 1.6e-05 16.0 samples/s ETA 32s")
    assert len(lines) == 10 and lines[-1].startswith("step 20/20 (100%)")
    assert all(STEP_LINE.match(line) for line in lines), lines
    shown.evaluated(20, {"f1": 0.9, "accuracy": 0.875, "samples": 64}, "f1", best=True)
    assert lines[-1] == "eval step 20: f1 0.9, accuracy 0.875 (best)"
    silent = []
    other = TrainingProgress("finetune", 20, 0, 32, enabled=False, terminal=False, clock=clock, write=silent.append)
    other.step(2, 1.0, 1e-5)
    other.evaluated(2, {"accuracy": 1.0}, "accuracy", best=True)
    assert silent == []  # the other processes of a launch say nothing


def test_a_slow_run_prints_a_line_every_minute():
    clock, lines = FakeClock(), []
    shown = TrainingProgress("distill", 1000, 0, 32, terminal=False, clock=clock, write=lines.append)
    for step in range(1, 31):
        clock.now += 25.0
        shown.step(step, loss=0.25, learning_rate=1e-4)
    assert [line.split()[1] for line in lines] == ["3/1000", "6/1000", "9/1000", "12/1000", "15/1000", "18/1000",
                                                  "21/1000", "24/1000", "27/1000", "30/1000"]
    assert lines[0].endswith("1.3 samples/s ETA 6h55m")


# ---- the constant baseline ------------------------------------------------------------------------
def test_constant_baseline_by_hand():
    labels = torch.tensor([1, 1, 1, 0, 0, 2, 1, 0])
    accuracy = constant_baseline("accuracy", labels, regression=False)
    assert (accuracy.metric, accuracy.value, accuracy.what) == ("accuracy", 0.5, "always predicting class 1")
    assert constant_baseline("matthews", labels, regression=False).value == 0.0
    binary = torch.tensor([0, 0, 0, 1])
    f1 = constant_baseline("f1_accuracy", binary, regression=False)
    assert f1.metric == "f1" and f1.value == pytest.approx(2 / 5)  # predicting 1 always: precision 1/4, recall 1
    scores = torch.tensor([0.5, 1.5, 2.5, 0.5])
    regression = constant_baseline("pearson_spearman", scores, regression=True)
    assert (regression.metric, regression.value, regression.what) == ("pearson", 0.0, "always predicting the mean")
    # within about one standard error of the baseline is no better than it
    assert accuracy.margin == pytest.approx((0.25 / 8) ** 0.5)
    assert accuracy.compare(0.6)["beats"] is False and accuracy.compare(0.9)["beats"] is True
    assert set(accuracy.compare(0.9)) >= {"metric", "value", "best", "beats"}


# ---- a tiny finetune with stderr captured (not a terminal) -----------------------------------------
def test_a_finetune_without_a_terminal_prints_progress_evaluations_and_where_its_outputs_are(capsys, tmp_path, init, toy):
    out = tmp_path / "ft"
    code, _, err = run_cli(capsys, *_finetune_args(init, toy, out, "--epochs", "4", "--learning-rate", "3e-3"))
    assert code == 0, err
    lines = err.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert steps and all(STEP_LINE.match(line) for line in steps), steps
    assert steps[-1].startswith("step 64/64 (100%)")
    evals = [line for line in lines if line.startswith("eval ")]
    assert len(evals) == 4 and all(EVAL_LINE.match(line) for line in evals), evals
    assert evals[0].endswith("(best)")
    assert not any(line.startswith("warning:") for line in lines), lines  # it learned: no baseline warning
    assert any(re.match(r"^64 steps in \d+s, trained on 1 process, best 1\.0000$", line) for line in lines), lines
    assert lines[-1] == f"wrote {out} (metrics.jsonl, training.json)"
    training = json.loads((out / "training.json").read_text())
    assert training["processes"] == 1
    assert training["constant_baseline"]["beats"] is True and training["constant_baseline"]["best"] == 1.0
    history = json.loads((out / "config.json").read_text())["ghostify"]["history"]
    assert history[-1]["command"] == "finetune" and history[-1]["processes"] == 1


def test_a_run_no_better_than_a_constant_prediction_says_so_once(capsys, tmp_path, init, toy):
    out = tmp_path / "ft"
    code, _, err = run_cli(capsys, *_finetune_args(init, toy, out, "--epochs", "1", "--learning-rate", "1e-9"))
    assert code == 0, err
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, err
    baseline = json.loads((out / "training.json").read_text())["constant_baseline"]
    assert baseline["metric"] == "accuracy" and baseline["beats"] is False
    assert f"({baseline['value']:.4f} on 64 validation examples)" in warned[0]
    assert f"the best accuracy {baseline['best']:.4f} is no better than always predicting class" in warned[0]
    assert "--learning-rate (now 1e-09)" in warned[0] and "--epochs (now 1)" in warned[0]


# ---- two processes: each line once ------------------------------------------------------------------
@pytest.mark.launch
def test_two_processes_say_each_line_once_and_record_the_count(tmp_path, init, toy):
    out = tmp_path / "ft2"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
               "-m", "ghostify", *_finetune_args(init, toy, out, "--epochs", "2", "--learning-rate", "1e-9")]
    env = dict(os.environ, OMP_NUM_THREADS="1", GHOSTIFY_DEBUG="")
    done = run_process(command, cwd=tmp_path, env=env, timeout=300)  # a tiny model's run: well under a minute
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[-1] == f"wrote {out} (metrics.jsonl, training.json)", lines
    assert len(lines) == len(set(lines)), lines  # no line twice (every step line differs)
    assert sum(line.startswith("warning:") for line in lines) == 1, lines  # the baseline's, once
    assert not any("broadcast_buffers" in line or "Warning" in line for line in lines), lines
    assert sum(line.startswith("eval step") for line in lines) == 2
    assert any(", trained on 2 processes" in line for line in lines), lines
    assert json.loads((out / "training.json").read_text())["processes"] == 2
    assert json.loads((out / "config.json").read_text())["ghostify"]["history"][-1]["processes"] == 2


def test_on_a_terminal_evaluation_has_a_bar_of_its_own_and_yields_every_batch():
    lines = []
    shown = TrainingProgress("finetune", 4, 0, 8, terminal=True, write=lines.append)
    shown.step(1, 0.5, 1e-5)
    assert shown.bar.tasks[0].fields["status"] == "loss 0.5 lr 1e-05"  # the training bar shows loss and rate
    batches = shown.evaluating([10, 20, 30])
    assert len(batches) == 3
    seen = []
    for batch in batches:
        seen.append((batch, [t.description for t in shown.bar.tasks]))
    assert seen == [(b, ["finetune", "evaluating"]) for b in (10, 20, 30)]
    assert [t.description for t in shown.bar.tasks] == ["finetune"]  # removed when the pass ends
    shown.close()
    assert lines == []  # no step lines on a terminal: the bar shows them
