"""The training half: losses, metrics, layer maps, finetune/distill/eval, resume, NaN, processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from ghostify import load_model
from ghostify.errors import GhostifyError
from ghostify.testing import tiny_checkpoint, write_toy_dataset
from ghostify.training import losses, metrics
from ghostify.training.layer_map import build_layer_map

from .conftest import run_cli, run_process

TOY = {"text_columns": ("sentence",), "label_column": "label"}
FAST = {"epochs": 4, "batch_size": 16, "learning_rate": 3e-3}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=256, validation=64)


@pytest.fixture(scope="module")
def toy_regression(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toyreg") / "data", train=256, validation=64, regression=True)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, toy):
    """A tiny model fine-tuned on the toy task (accuracy 1.0)."""
    from ghostify.steps import finetune

    root = tmp_path_factory.mktemp("teacher")
    tiny_checkpoint(root / "init")
    finetune(root / "init", root / "teacher", dataset=str(toy), **TOY, **FAST)
    return root / "teacher"


# ---- losses and metrics against hand-computed values ------------------------------------------
def test_soft_cross_entropy_by_hand():
    student, teacher = torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[math.log(3.0), 0.0]])
    # teacher p = (3/4, 1/4); student log q = (log 1/4, log 3/4)
    expected = -(0.75 * math.log(0.25) + 0.25 * math.log(0.75))
    assert losses.soft_cross_entropy(student, teacher).item() == pytest.approx(expected, rel=1e-6)
    # temperature 2 halves the logits: p = q = (sqrt3, 1)/(sqrt3+1) swapped
    a = math.sqrt(3.0) / (math.sqrt(3.0) + 1)
    expected_t = -(a * math.log(1 - a) + (1 - a) * math.log(a))
    assert losses.soft_cross_entropy(student, teacher, temperature=2.0).item() == pytest.approx(expected_t, rel=1e-6)


def test_masked_mse_ignores_padding():
    student = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    teacher = torch.tensor([[[0.0, 2.0], [3.0, 6.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0]]).bool()
    assert losses.masked_mse(student, teacher, mask).item() == pytest.approx((1 + 0 + 0 + 4) / 4)


def test_attention_score_mse_ignores_padded_queries_and_keys():
    student = torch.zeros(1, 1, 3, 3)
    teacher = torch.zeros(1, 1, 3, 3)
    teacher[0, 0, 0, 1] = 2.0  # real pair
    teacher[0, 0, 0, 2] = 50.0  # padded key
    teacher[0, 0, 2, 0] = 50.0  # padded query
    mask = torch.tensor([[1, 1, 0]]).bool()
    assert losses.attention_score_mse(student, teacher, mask).item() == pytest.approx(4.0 / 4)


def test_metrics_by_hand():
    pred = torch.tensor([1, 1, 0, 0, 1])
    gold = torch.tensor([1, 0, 0, 1, 1])
    assert metrics.accuracy(pred, gold) == pytest.approx(0.6)
    assert metrics.f1(pred, gold) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # tp=2 tn=1 fp=1 fn=1: (2*1 - 1*1) / sqrt(3*3*2*2)
    assert metrics.matthews(pred, gold) == pytest.approx(1 / 6)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert metrics.pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert metrics.spearman(x, torch.tensor([1.0, 4.0, 9.0, 100.0])) == pytest.approx(1.0)
    # ties take their average rank: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4)
    expected = metrics.pearson(torch.tensor([1.0, 2.5, 2.5, 4.0]), x)
    assert metrics.spearman(torch.tensor([0.0, 5.0, 5.0, 9.0]), x) == pytest.approx(expected)


def test_layer_maps():
    assert build_layer_map(4, 4).pairs == ((1, 1), (2, 2), (3, 3), (4, 4))
    assert build_layer_map(3, 6).pairs == ((1, 2), (2, 4), (3, 6))  # uniform, TinyBERT's g(m) = m·N/M
    assert build_layer_map(2, 6, "1:3,2:6").pairs == ((1, 3), (2, 6))
    for spec in ("1:7", "0:1", "1-2", "1:2,1:3"):
        with pytest.raises(GhostifyError):
            build_layer_map(2, 6, spec)
    with pytest.raises(GhostifyError, match="more layers"):
        build_layer_map(6, 3)


# ---- commands ----------------------------------------------------------------------------------
def test_finetune_learns_and_keeps_the_best_epoch(teacher, toy, capsys):
    info = json.loads((teacher / "training.json").read_text())
    accuracies = [e["eval"]["accuracy"] for e in info["evaluations"]]
    assert info["best"] == max(accuracies) >= 0.95
    lines = [json.loads(line) for line in (teacher / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in line for line in lines) and any("eval" in line for line in lines)
    code, out, err = run_cli(capsys, "eval", teacher, "--dataset", toy, "--text-columns", "sentence", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["metrics"]["accuracy"] == pytest.approx(info["best"]) and result["samples"] == 64
    assert [h["command"] for h in load_model(teacher).config.ghostify["history"]] == ["finetune"]


def test_regression_task(tmp_path, toy_regression):
    from ghostify.steps import evaluate, finetune

    tiny_checkpoint(tmp_path / "init", num_labels=1)
    result = finetune(tmp_path / "init", tmp_path / "reg", dataset=str(toy_regression), text_columns=("sentence",),
                      epochs=4, batch_size=16, learning_rate=3e-3)
    assert set(result.metrics[-1]["eval"]) == {"pearson", "spearman", "samples"}
    scores = evaluate(tmp_path / "reg", dataset=str(toy_regression), text_columns=("sentence",))["metrics"]
    assert scores["pearson"] > 0.5


def test_distill_and_finetune_with_teacher(tmp_path, teacher, toy):
    from ghostify.steps import distill, evaluate, finetune, prune

    prune(teacher, tmp_path / "pruned", width="2/4")
    before = {k: v.clone() for k, v in load_model(teacher).state_dict().items()}
    distill(teacher, tmp_path / "pruned", tmp_path / "distilled", dataset=str(toy), **TOY, attention_weight=1.0,
            logit_weight=1.0, epochs=2, batch_size=16, learning_rate=3e-3)
    after = load_model(teacher).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the teacher was never trained
    distilled = load_model(tmp_path / "distilled")
    assert distilled.config.ghostify["heads"] == load_model(tmp_path / "pruned").config.ghostify["heads"]
    assert [h["command"] for h in distilled.config.ghostify["history"]] == ["finetune", "prune", "distill"]
    finetune(tmp_path / "distilled", tmp_path / "final", dataset=str(toy), **TOY, teacher=str(teacher), epochs=2,
             batch_size=16, learning_rate=3e-3)
    accuracy = evaluate(tmp_path / "final", dataset=str(toy), **TOY)["metrics"]["accuracy"]
    assert accuracy >= 0.9


def test_evaluate_first_keeps_the_start_when_no_epoch_beats_it(tmp_path, teacher, toy):
    """Fine-tuning the toy teacher (validation accuracy 1.0) on flipped training labels only makes it worse: with
    --evaluate-first its output is the teacher, weight for weight, and training.json says the start was best;
    without, the output is the worse last epoch (the check can fail)."""
    from ghostify.steps import finetune

    flipped = tmp_path / "flipped"
    flipped.mkdir()
    (flipped / "validation.csv").write_text((toy / "validation.csv").read_text())
    rows = (toy / "train.csv").read_text().splitlines()
    (flipped / "train.csv").write_text("\n".join([rows[0], *(f"{r[:-1]}{1 - int(r[-1])}" for r in rows[1:])]) + "\n")
    settings = {**TOY, "epochs": 1, "batch_size": 16, "learning_rate": 3e-3}
    finetune(teacher, tmp_path / "kept", dataset=str(flipped), evaluate_first=True, **settings)
    with pytest.warns(UserWarning, match="no better than always predicting"):
        finetune(teacher, tmp_path / "trained", dataset=str(flipped), **settings)
    kept = json.loads((tmp_path / "kept" / "training.json").read_text())
    assert kept["best_step"] == 0 and kept["best"] == 1.0
    assert [(e["step"], e["epoch"]) for e in kept["evaluations"]] == [(0, 0), (kept["steps"], 1)]
    assert kept["evaluations"][1]["eval"]["accuracy"] < 1.0
    start = load_model(teacher).state_dict()
    assert all(torch.equal(start[k], v) for k, v in load_model(tmp_path / "kept").state_dict().items())
    trained = json.loads((tmp_path / "trained" / "training.json").read_text())
    assert trained["best"] < 1.0 and [e["step"] for e in trained["evaluations"]] == [trained["steps"]]


def test_projections_bridge_hidden_sizes_and_are_saved_apart(tmp_path, teacher, toy):
    from safetensors.torch import load_file

    from ghostify.steps import distill

    tiny_checkpoint(tmp_path / "narrow", hidden_size=16, intermediate_size=20)
    distill(teacher, tmp_path / "narrow", tmp_path / "out", dataset=str(toy), **TOY, epochs=1, batch_size=16)
    projections = load_file(str(tmp_path / "out" / "distill_projections.safetensors"))
    assert projections["hidden.weight"].shape == (32, 16) and projections["embeddings.weight"].shape == (32, 16)
    assert "hidden.weight" not in " ".join(load_model(tmp_path / "out").state_dict())


@pytest.mark.parametrize("family", ["distilbert", "albert", "deberta-v2", "mpnet", "electra"])
def test_distill_every_family(tmp_path, toy, family):
    from ghostify.steps import distill

    tiny_checkpoint(tmp_path / "t", family, seed=1)
    tiny_checkpoint(tmp_path / "s", family, seed=2)
    result = distill(tmp_path / "t", tmp_path / "s", tmp_path / "d", dataset=str(toy), **TOY, epochs=1, batch_size=32,
                     max_samples=64, learning_rate=1e-3,
                     attention_weight=0.0 if family in ("deberta-v2", "mpnet") else 1.0)
    assert result.steps == 2
    before, after = load_model(tmp_path / "s").state_dict(), load_model(tmp_path / "d").state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the student was trained


def test_attention_loss_on_families_without_attention_interface_is_a_clear_error(tmp_path, toy):
    from ghostify.steps import distill

    tiny_checkpoint(tmp_path / "t", "mpnet")
    with pytest.raises(GhostifyError, match="attention interface"):
        distill(tmp_path / "t", tmp_path / "t", tmp_path / "d", dataset=str(toy), **TOY, attention_weight=1.0)


# ---- the loop: resume, NaN, processes ----------------------------------------------------------
class _Crash(Exception):
    pass


def _crash_at(step: int):
    def on_step(current: int) -> None:
        if current == step:
            raise _Crash

    return on_step


def test_resumed_run_equals_uninterrupted_run(tmp_path, toy_regression):
    """(A regression: its correlation rises every epoch, so the weights compared are the last epoch's; on the toy
    classification the first epoch's were the best, and an exact resume of the second was never compared.)"""
    from ghostify.steps import finetune

    tiny_checkpoint(tmp_path / "init", num_labels=1)
    args = dict(dataset=str(toy_regression), text_columns=("sentence",), epochs=2, batch_size=16, learning_rate=3e-3,
                checkpoint_steps=5)
    finetune(tmp_path / "init", tmp_path / "whole", **args)
    with pytest.raises(_Crash):
        finetune(tmp_path / "init", tmp_path / "resumed", on_step=_crash_at(17), **args)  # mid epoch 2
    assert not (tmp_path / "resumed").exists() and (tmp_path / "resumed.partial" / "state").is_dir()
    with pytest.raises(GhostifyError, match="--resume"):
        finetune(tmp_path / "init", tmp_path / "resumed", **args)
    finetune(tmp_path / "init", tmp_path / "resumed", resume=True, **args)
    assert json.loads((tmp_path / "whole" / "training.json").read_text())["best_step"] == 32  # the last epoch's
    whole, resumed = load_model(tmp_path / "whole").state_dict(), load_model(tmp_path / "resumed").state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert not (tmp_path / "resumed.partial").exists()


def test_max_steps_cuts_the_last_epoch_and_a_cut_run_resumes_exactly(tmp_path, toy_regression):
    """--max-steps (what a time budget uses to fill its time): 256 examples in steps of 16 are 16 steps an epoch;
    3 epochs cut at 32 steps are 2 whole epochs, byte for byte (the schedule decays to zero at the cut); cut at 40,
    the third epoch stops after 8 steps, is evaluated as a whole one, and a run killed inside it resumes exactly.
    (A regression: its correlation rises every epoch here, so the weights kept are the last ones, not an earlier
    best epoch's.)"""
    from ghostify.steps import finetune

    tiny_checkpoint(tmp_path / "init", num_labels=1)
    args = dict(dataset=str(toy_regression), text_columns=("sentence",), batch_size=16, learning_rate=3e-3,
                checkpoint_steps=5)
    finetune(tmp_path / "init", tmp_path / "two", epochs=2, **args)
    finetune(tmp_path / "init", tmp_path / "cut-at-two", epochs=3, max_steps=32, **args)
    two, cut = load_model(tmp_path / "two").state_dict(), load_model(tmp_path / "cut-at-two").state_dict()
    assert all(torch.equal(two[k], cut[k]) for k in two)
    finetune(tmp_path / "init", tmp_path / "whole", epochs=3, max_steps=40, **args)
    training = json.loads((tmp_path / "whole" / "training.json").read_text())
    assert training["steps"] == 40 and training["best_step"] == 40
    assert [e["epoch"] for e in training["epoch_seconds"]] == [1, 2, 3]
    assert [e["step"] for e in training["evaluations"]] == [16, 32, 40]
    with pytest.raises(_Crash):
        finetune(tmp_path / "init", tmp_path / "resumed", epochs=3, max_steps=40, on_step=_crash_at(37), **args)
    finetune(tmp_path / "init", tmp_path / "resumed", epochs=3, max_steps=40, resume=True, **args)
    whole, resumed = load_model(tmp_path / "whole").state_dict(), load_model(tmp_path / "resumed").state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert not any(torch.equal(whole[k], two[k]) for k in whole if k.startswith("bert.encoder"))


def test_a_deadline_ends_training_at_a_step_and_stop_step_trains_the_same_bytes_again(tmp_path, toy_regression):
    """A time budget's last stage has a deadline: past it, training ends at the step it has reached (never before
    ``least`` steps), evaluated and saved as a whole epoch is, the learning-rate schedule still the one its epochs
    sized (16 steps an epoch, 48 in 3: at step 20 the rate is 3e-3 x 28/48, not decayed to zero at the stop);
    training.json says where it stopped, and ``stop_step`` there trains the same bytes without a deadline."""
    from ghostify.steps import finetune
    from ghostify.training.loop import Deadline

    tiny_checkpoint(tmp_path / "init", num_labels=1)
    args = dict(dataset=str(toy_regression), text_columns=("sentence",), batch_size=16, learning_rate=3e-3, epochs=3)
    finetune(tmp_path / "init", tmp_path / "deadline", deadline=Deadline(at=0.0, least=21), **args)  # long passed
    training = json.loads((tmp_path / "deadline" / "training.json").read_text())
    assert training["steps"] == 21 and training["stopped_at"] == 21 and training["schedule_steps"] == 48
    assert [e["step"] for e in training["evaluations"]] == [16, 21]
    logged = [json.loads(line) for line in (tmp_path / "deadline" / "metrics.jsonl").read_text().splitlines()]
    assert next(r["lr"] for r in logged if r.get("step") == 20 and "lr" in r) == pytest.approx(3e-3 * 28 / 48)
    finetune(tmp_path / "init", tmp_path / "stopped", stop_step=21, **args)
    again = json.loads((tmp_path / "stopped" / "training.json").read_text())
    assert again["steps"] == 21 and "stopped_at" not in again
    first, second = load_model(tmp_path / "deadline").state_dict(), load_model(tmp_path / "stopped").state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    with pytest.raises(GhostifyError, match="--stop-step 0 must be at least 1"):
        finetune(tmp_path / "init", tmp_path / "bad", stop_step=0, **args)


def test_non_finite_loss_stops_with_a_clear_error_and_keeps_the_last_good_state(tmp_path, toy):
    from ghostify.data import padding_collator
    from ghostify.steps.training_common import task_inputs
    from ghostify.training import FinetuneObjective, TrainSettings, train

    tiny_checkpoint(tmp_path / "init")
    data = task_inputs(tmp_path / "init", dataset=str(toy), task=None, text_columns=("sentence",), label_column="label",
                       max_length=32, max_samples=None, seed=0, evaluate=False)
    model = load_model(tmp_path / "init")

    class Exploding(FinetuneObjective):
        calls = 0

        def forward(self, batch):
            loss, parts = super().forward(batch)
            Exploding.calls += 1
            return (loss * float("nan") if Exploding.calls == 4 else loss), parts

    objective = Exploding(model, data.kind)
    settings = TrainSettings(epochs=1, batch_size=16, checkpoint_steps=2)
    with pytest.raises(GhostifyError, match="loss became nan at step 4"):
        train(objective, data.train_rows, padding_collator(data.tokenizer), settings, tmp_path / "out",
              lambda *a: None)
    progress = json.loads((tmp_path / "out.partial" / "state" / "progress.json").read_text())
    assert progress["step"] == 2 and not (tmp_path / "out").exists()


def _launch(args: list[str], processes: int, cwd) -> subprocess.CompletedProcess:
    if processes == 1:
        command = [sys.executable, "-m", "ghostify", *args]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", "0", "-m", "ghostify", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", GHOSTIFY_DEBUG="")
    return run_process(command, cwd=cwd, env=env, timeout=300)  # a tiny model's run: well under a minute


@pytest.mark.launch
def test_two_processes_give_the_same_metrics_as_one(tmp_path, toy, teacher):
    tiny_checkpoint(tmp_path / "init")
    common = ["--dataset", str(toy), "--text-columns", "sentence", "--epochs", "3", "--batch-size", "16",
              "--learning-rate", "3e-3"]
    results = {}
    for n in (1, 2):
        ft = _launch(["finetune", str(tmp_path / "init"), "-o", str(tmp_path / f"ft{n}"), *common], n, tmp_path)
        assert ft.returncode == 0, ft.stderr[-3000:]
        d = _launch(["distill", "--teacher", str(teacher), "--student", str(tmp_path / "init"), "-o",
                     str(tmp_path / f"d{n}"), "--logit-weight", "1", *common], n, tmp_path)
        assert d.returncode == 0, d.stderr[-3000:]
        results[n] = [json.loads((tmp_path / f"{kind}{n}" / "training.json").read_text()) for kind in ("ft", "d")]
    for one, two in zip(results[1], results[2]):
        assert one["steps"] == two["steps"]
        assert two["evaluations"][-1]["eval"]["samples"] == 64  # gathered without duplicates
        assert abs(one["best"] - two["best"]) <= 0.05


@pytest.mark.parametrize(("device", "engine", "freed"), [("cpu", None, False), ("cpu", object(), True),
                                                         ("cuda", None, True)], ids=["cpu", "cpu-deepspeed", "gpu"])
def test_a_run_ends_with_accelerates_free_memory_only_where_it_frees_something(device, engine, freed):
    """free_memory() is a full garbage collection: on a CPU it frees nothing the run's Accelerator does not take
    with it, and costs a tenth of a second per run (seconds in a long process); a GPU's cached blocks and a
    DeepSpeed engine are still released."""
    from types import SimpleNamespace
    from unittest import mock

    from ghostify.training.sharding import end_run

    accelerator = SimpleNamespace(device=torch.device(device), trackers=[], deepspeed_engine_wrapped=engine,
                                  free_memory=mock.Mock())
    end_run(accelerator, None)
    assert accelerator.free_memory.called is freed
