"""The ghost-vs-pruned study driver (benchmarks/study_ghost_vs_pruned.py): its statistics by hand,
and a tiny run that is resumed, refuses to mix budgets, and pairs its arms on one pruned model."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from ghostify.testing import tiny_checkpoint, tiny_config

from .conftest import benchmark_module

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study():
    return benchmark_module("study_ghost_vs_pruned")


def test_paired_interval_hand_computed(study):
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.303, half-width 4.303 / sqrt(3) = 2.484
    assert study.paired_interval([1.0, 2.0, 3.0]) == "+2.0 [-0.5, +4.5]"
    assert study.paired_interval([-1.5]) == "-1.5 (1 seed)"
    assert study.paired_interval([]) == "–"


def test_glue_score_is_the_mean_of_the_task_metrics(study):
    assert study.glue_score({"accuracy": 0.8, "f1": 0.9}) == pytest.approx(85.0)
    assert study.glue_score({"pearson": 0.5, "spearman": 0.7, "loss": 3.0}) == pytest.approx(60.0)


def test_grid_arms(study):
    arms = study.grid_arms(["main", "init", "ablation"], ["1/12", "3/12"], "3/12", "3/12", ["center", "zero-scale"])
    keys = [a.key for a in arms]
    assert len(keys) == len(set(keys))
    assert keys[:5] == ["pruned@1/12", "ghost@1/12", "pruned@3/12", "ghost@3/12", "ghost@12/12"]
    assert {"ghost-init-center@3/12", "ghost-init-zero-scale@3/12", "ghost-k1@3/12", "ghost-k9@3/12",
            "ghost-no-softmax@3/12", "ghost-no-relu@3/12"} <= set(keys)
    assert next(a for a in arms if a.key == "ghost-init-center@3/12").ghost == {"init": "center"}


@pytest.mark.slow  # a benchmark harness (benchmarks/study.py), not a command: the full suite runs its tests
def test_a_tiny_study_runs_resumes_and_keeps_one_budget(study, glue, tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "tiny")
    results, work = tmp_path / "results", tmp_path / "work"
    args = ["--model", str(model), "--dataset", str(glue), "--tasks", "mrpc", "--widths", "1/2", "--seeds", "0,1",
            "--grid", "main", "--grid", "init", "--inits", "zero-scale", "--init-width", "1/2",
            "--train-samples", "16", "--results", str(results), "--work", str(work)]
    assert study.main(args) == 0
    rows = study.read_results(results / "results.jsonl")
    keys = sorted(f"{r['seed']} {r['arm']}@{r['width']}" for r in rows)
    per_seed = ["ghost-init-zero-scale@1/2", "ghost@1/2", "ghost@12/12", "pruned@1/2", "teacher@12/12"]
    assert keys == [f"{s} {k}" for s in (0, 1) for k in per_seed]
    by = {(r["seed"], r["arm"], r["width"]): r for r in rows}
    config = tiny_config("bert")
    ghost_params = 2 * config.num_hidden_layers * config.hidden_size * 3  # after O and FFN2, k = 3
    for seed in (0, 1):  # the arms share one pruned model: the ghost arm adds only the ghost modules
        pruned, ghost = by[(seed, "pruned", "1/2")], by[(seed, "ghost", "1/2")]
        assert ghost["params"] - pruned["params"] == ghost_params and ghost["flops"] > pruned["flops"]
        assert by[(seed, "ghost-init-zero-scale", "1/2")]["ghost"] == {"init": "zero-scale"}
    table = (results / "table.md").read_text()
    assert "| mrpc | 1/2 |" in table and "ghost − pruned (95% CI)" in table
    assert (results / "score_vs_flops.png").stat().st_size > 1000
    assert (results / "scores_by_arm.png").stat().st_size > 1000
    assert json.loads((results / "budget.json").read_text())["train_samples"] == 16

    assert not list(work.glob("*/claim*"))  # every (task, seed) released

    # resumed: every arm is already done, nothing is trained again
    before = (results / "results.jsonl").read_bytes()
    assert study.main(args) == 0
    assert (results / "results.jsonl").read_bytes() == before

    # another budget is refused in one line, and nothing is written
    code = study.main([a if a != "16" else "8" for a in args])
    assert code == 2
    assert "another budget" in capsys.readouterr().err
    assert (results / "results.jsonl").read_bytes() == before
    # also into fresh results: the work directory's teachers are of the first budget
    other = [a if a != "16" else "8" for a in args]
    other[other.index(str(results))] = str(tmp_path / "other-results")
    assert study.main(other) == 2
    assert "holds checkpoints of another budget" in capsys.readouterr().err


@pytest.mark.slow
def test_an_interrupted_arm_goes_on_from_its_last_complete_stage(study, glue, tmp_path):
    model = tiny_checkpoint(tmp_path / "tiny")
    results, work = tmp_path / "results", tmp_path / "work"
    args = ["--model", str(model), "--dataset", str(glue), "--tasks", "mrpc", "--widths", "1/2", "--seeds", "0",
            "--grid", "main", "--train-samples", "16", "--results", str(results), "--work", str(work), "--keep"]
    assert study.main(args) == 0
    rows = study.read_results(results / "results.jsonl")
    ghost = next(r for r in rows if r["arm"] == "ghost" and r["width"] == "1/2")
    # killed after distillation, before fine-tuning ended: the row is missing and so is final/
    arm = work / "mrpc-s0" / "arms" / "ghost@1of2"
    distilled = arm / "distilled" / "model.safetensors"
    written = distilled.stat().st_mtime_ns
    shutil.rmtree(arm / "final")
    (results / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r is not ghost))
    assert study.main(args) == 0
    again = next(r for r in study.read_results(results / "results.jsonl") if r["arm"] == "ghost" and r["width"] == "1/2")
    assert distilled.stat().st_mtime_ns == written  # not distilled again
    assert again["resumed"] is True and "resumed" not in ghost
    assert again["metrics"] == ghost["metrics"] and again["kernel_drift"] == ghost["kernel_drift"]


@pytest.mark.slow
def test_rows_from_another_teacher_are_not_paired_with_new_arms(study, glue, tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "tiny")
    results, work = tmp_path / "results", tmp_path / "work"
    args = ["--model", str(model), "--dataset", str(glue), "--tasks", "mrpc", "--widths", "1/2", "--seeds", "0",
            "--grid", "main", "--train-samples", "16", "--results", str(results), "--work", str(work)]
    assert study.main(args) == 0
    rows = study.read_results(results / "results.jsonl")
    marks = {r["teacher_sha"] for r in rows}
    assert len(marks) == 1 and len(next(iter(marks))) == 16  # every row names the one teacher
    without_ghost = "".join(json.dumps(r) + "\n" for r in rows if r["arm"] != "ghost")

    def lose_work_and(rows_text: str) -> None:
        shutil.rmtree(work / "mrpc-s0")  # the work directory is lost: the teacher is trained again
        (results / "results.jsonl").write_text(rows_text)

    # trained again on the same machine, the teacher is the same bytes: the missing arm runs, paired
    lose_work_and(without_ghost)
    assert study.main(args) == 0
    again = study.read_results(results / "results.jsonl")
    assert {r["teacher_sha"] for r in again} == marks and sorted(map(study.result_key, again)) == sorted(map(study.result_key, rows))

    # rows of another teacher: refused in one line, nothing run or written
    other = without_ghost.replace(next(iter(marks)), "0" * 16)
    lose_work_and(other)
    assert study.main(args) == 1
    err = capsys.readouterr().err
    assert "mrpc seed 0: its recorded rows came from teacher 0000000000000000" in err and "superseded.jsonl" in err
    assert (results / "results.jsonl").read_text() == other and not list(work.glob("*/claim*"))

    # rows from before fingerprints: the retrained teacher's evaluation must match the recorded one
    legacy = [{k: v for k, v in r.items() if k != "teacher_sha"} for r in rows if r["arm"] != "ghost"]
    teacher = next(r for r in legacy if r["arm"] == "teacher")
    teacher["metrics"] = {k: v + 1e-7 for k, v in teacher["metrics"].items()}
    lose_work_and("".join(json.dumps(r) + "\n" for r in legacy))
    assert study.main(args) == 1
    assert "its teacher was trained again here and scores" in capsys.readouterr().err


def test_a_claim_keeps_a_second_process_off_its_task_and_seed(study, tmp_path):
    import subprocess

    unit = tmp_path / "sst2-s0"
    assert study.claim(unit) and study.claim(unit)  # taken, and ours again
    assert (unit / "claim").read_text() == str(os.getpid()) and not list(unit.glob("claim.*"))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (unit / "claim").write_text(str(other.pid))
        assert not study.claim(unit)  # a live process holds it
    finally:
        other.kill()
        other.wait()
    assert study.claim(unit)  # its process is gone: taken over
    assert (unit / "claim").read_text() == str(os.getpid())


def test_a_claimed_task_and_seed_is_left_to_its_process(study, glue, tmp_path, capsys):
    results, work = tmp_path / "results", tmp_path / "work"
    for seed in (0, 1):  # held by a live process (the one that started pytest)
        (work / f"mrpc-s{seed}").mkdir(parents=True)
        (work / f"mrpc-s{seed}" / "claim").write_text(str(os.getppid()))
    args = ["--model", str(tmp_path / "absent"), "--dataset", str(glue), "--tasks", "mrpc", "--seeds", "0,1",
            "--results", str(results), "--work", str(work)]
    assert study.main(args) == 0
    assert capsys.readouterr().out.count("another process runs it") == 2
    assert study.read_results(results / "results.jsonl") == []


def test_tables_hand_computed(study):
    def row(seed, arm, score, width="3/12"):
        return {"task": "rte", "seed": seed, "arm": arm, "width": width, "score": score}

    results = [row(s, "teacher", 90.0 + s, "12/12") for s in range(3)]
    results += [row(s, "pruned", v) for s, v in enumerate([80.0, 81.0, 82.0])]
    results += [row(s, "ghost", v) for s, v in enumerate([81.0, 83.0, 82.0])]
    results += [row(s, "ghost-k1", v) for s, v in enumerate([79.0, 80.0, 81.0])]
    text = study.tables(results)
    # ghost − pruned: 1, 2, 0 -> mean 1, sd 1, half-width 4.303 / sqrt(3) = 2.484
    assert "| rte | 3/12 | 91.0 ± 1.0 | 81.0 ± 1.0 | 82.0 ± 1.0 | +1.0 [-1.5, +3.5] | 3 |" in text
    # k1 − ghost: -2, -3, -1; k1 − pruned: -1, -1, -1 (no spread)
    assert "| ghost-k1 | 3/12 | rte | 80.0 ± 1.0 | -2.0 [-4.5, +0.5] | -1.0 [-1.0, -1.0] | 3 |" in text
    assert "| 3/12 | 81.0 ± 1.0 | 82.0 ± 1.0 | +1.0 [-1.5, +3.5] | 3 |" in text  # the average over the (one) task
    assert "average" not in text.split("Ghost variants")[1]  # one task: no average row
    assert "Decision" not in text  # nor a decision over tasks


def test_variant_average_pairs_the_per_seed_task_means(study):
    def row(task, seed, arm, score):
        return {"task": task, "seed": seed, "arm": arm, "width": "3/12", "score": score}

    results = []
    for task, base in (("rte", 50.0), ("sst2", 80.0)):
        results += [row(task, s, "pruned", base + s) for s in range(3)]
        results += [row(task, s, "ghost", base + 2 * s) for s in range(3)]
    results += [row("rte", s, "ghost-k1", v) for s, v in enumerate([51.0, 52.0, 53.0])]
    results += [row("sst2", s, "ghost-k1", v) for s, v in enumerate([81.0, 80.0, 83.0])]
    results.append(row("rte", 3, "ghost-k1", 99.0))  # a seed only one task has: left out of the average
    text = study.tables(results)
    # per seed, mean over tasks: k1 66, 66, 68 (mean 66.7, sd 1.15); k1 − ghost: (1+1)/2, (0-2)/2, (-1-1)/2 =
    # 1, -1, -1 (mean -0.33, sd 1.155, half-width 4.303 * 1.155 / sqrt(3) = 2.87); k1 − pruned: 1, 0, 1
    # (mean 0.67, sd 0.577, half-width 1.43)
    assert "| ghost-k1 | 3/12 | average | 66.7 ± 1.2 | -0.3 [-3.2, +2.5] | +0.7 [-0.8, +2.1] | 3 |" in text
    decision = text.split("Decision")[1].split("Drift")[0]
    # ghost − pruned per seed over both tasks: 0, 1, 2 -> +1.0 [-1.5, +3.5], not above zero
    assert "| ghost | 3/12 | rte, sst2 | +1.0 [-1.5, +3.5] | 3 | no |" in decision
    assert "| ghost-k1 | 3/12 | rte, sst2 | +0.7 [-0.8, +2.1] | 3 | no |" in decision
    # the main average, per seed over both tasks: pruned 65, 66, 67; ghost 65, 67, 69; ghost − pruned 0, 1, 2
    assert "| 3/12 | 66.0 ± 1.0 | 67.0 ± 2.0 | +1.0 [-1.5, +3.5] | 3 |" in text


def test_the_decision_reads_the_task_average_with_and_without_stsb(study):
    def row(task, seed, arm, score):
        return {"task": task, "seed": seed, "arm": arm, "width": "3/12", "score": score}

    gains = {"rte": [1.0, 2.0, 1.5], "sst2": [1.0, 1.0, 1.0], "stsb": [-3.0, 3.0, 0.0]}
    results = [row(t, s, "pruned", 50.0) for t in gains for s in range(3)]
    results += [row(t, s, "ghost-lr100", 50.0 + g) for t, per_seed in gains.items() for s, g in enumerate(per_seed)]
    results.append(row("sst2", 0, "ghost-lr10", 51.0))  # a sweep arm on one task: no row
    decision = study.tables(results).split("Decision")[1].split("Drift")[0]
    # over all three tasks, per seed: -1/3, 2, 5/6: mean 0.83, sd 1.17, half-width 2.9 -> not above zero
    assert "| ghost-lr100 | 3/12 | rte, sst2, stsb | +0.8 [-2.1, +3.7] | 3 | no |" in decision
    # without STS-B: 1, 1.5, 1.25: mean 1.25, sd 0.25, half-width 4.303 * 0.25 / sqrt(3) = 0.62 -> above zero
    assert "| ghost-lr100 | 3/12 | rte, sst2 | +1.2 [+0.6, +1.9] | 3 | yes |" in decision
    assert "ghost-lr10 " not in decision


def test_report_over_some_tasks_leaves_the_full_report_alone(study, tmp_path, capsys):
    def row(task, seed, arm, score):
        return {"task": task, "seed": seed, "arm": arm, "width": "3/12", "score": score, "flops": 1e9}

    results = tmp_path / "results"
    results.mkdir()
    rows = [row(t, s, a, base + s) for t, base in (("rte", 50.0), ("stsb", 10.0), ("sst2", 80.0))
            for s in range(2) for a in ("pruned", "ghost")]
    (results / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert study.main(["--report-only", "--results", str(results), "--report-tasks", "sst2,rte"]) == 0
    subset = (results / "table-sst2-rte.md").read_text()
    assert "on sst2, rte" in subset and "| 3/12 | 65.5 ± 0.7 | 65.5 ± 0.7 | +0.0 [+0.0, +0.0] | 2 |" in subset  # the average over rte and sst2
    assert "stsb" not in subset
    assert not any((results / name).exists() for name in ("table.md", "score_vs_flops.png", "scores_by_arm.png"))
    assert study.main(["--report-only", "--results", str(results), "--report-tasks", "sst2,cola"]) == 2
    assert "has results for rte, sst2, stsb" in capsys.readouterr().err


def test_kernel_drift_reads_the_applied_kernels(tmp_path):
    """benchmarks/ghost_kernel_drift.py: a fresh ghost module's applied kernels are 1/k per tap, with
    softmax or without; a copy has no drift; a known change gives its hand-computed relative change."""
    import torch

    from ghostify import steps

    drift = benchmark_module("ghost_kernel_drift")
    model = tiny_checkpoint(tmp_path / "tiny")
    for softmax in (True, False):
        ghost = tmp_path / f"ghost-{softmax}"
        steps.attach_ghost(model, ghost, softmax=softmax)
        kernels, weights = drift.kernels_and_weights(ghost)
        config = tiny_config("bert")
        assert len(kernels) == 2 * config.num_hidden_layers  # after O and after FFN2
        assert all(torch.allclose(k, torch.full_like(k, 1 / 3)) for k in kernels.values())
        assert weights and not any(name.startswith(k + ".") for name in weights for k in kernels)  # kernels apart
        assert drift.relative_change(kernels, kernels) == (0.0, 0.0)
    before = {"a": torch.tensor([3.0, 4.0])}
    assert drift.relative_change(before, {"a": torch.tensor([3.0, 4.5])}) == pytest.approx((0.1, 0.5))  # 0.5 / 5


# ---- issue 23: the medium protocol -----------------------------------------------------------------
def test_the_medium_protocol(study):
    protocol = study.PROTOCOLS["medium"]
    budget = protocol["budget"]
    assert Path(protocol["model"]).name == "all-MiniLM-L6-v2" and protocol["widths"] == "3/12"
    assert protocol["grid"] == ["ghost-lr"]
    assert [budget.samples(t) for t in ("sst2", "mrpc", "rte", "stsb")] == [8000, None, None, None]
    assert (budget.teacher_epochs, budget.distill_epochs, budget.finetune_epochs) == (2, 2, 2)
    arms = study.grid_arms(["ghost-lr"], ["3/12"], "3/12", "3/12", [], 10.0)
    assert [(a.key, a.ghost, a.ghost_lr, a.tasks) for a in arms] == [
        ("pruned@3/12", None, None, None), ("ghost@3/12", {}, None, None), ("ghost-lr10@3/12", {}, 10.0, None),
        ("zero-scale-lr10@3/12", {"init": "zero-scale"}, 10.0, None)]
    sweep = study.grid_arms(["lr-sweep"], ["3/12"], "3/12", "3/12", [], 10.0)
    assert [(a.key, a.ghost_lr) for a in sweep] == [("pruned@3/12", None), ("ghost@3/12", None),
                                                    ("ghost-lr10@3/12", 10.0), ("ghost-lr30@3/12", 30.0),
                                                    ("ghost-lr100@3/12", 100.0)]
    assert all(a.tasks == ("sst2",) and a.runs_on("sst2") and not a.runs_on("rte") for a in sweep)
    # both grids: the sweep's x10 is the ghost-lr arm, and the shared arms run on every task
    both = study.grid_arms(["ghost-lr", "lr-sweep"], ["3/12"], "3/12", "3/12", [], 10.0)
    assert [a.key for a in both] == ["pruned@3/12", "ghost@3/12", "ghost-lr10@3/12", "zero-scale-lr10@3/12",
                                     "ghost-lr30@3/12", "ghost-lr100@3/12"]
    assert [a.tasks for a in both[:4]] == [None] * 4
    assert study.ghost_rate(both[2], 2e-4) == {"ghost_learning_rate": pytest.approx(2e-3)}
    assert study.ghost_rate(both[1], 2e-4) == {}


def test_the_cpu_budget_record_is_unchanged(study):
    """Fields only the medium protocol sets stay out of budget.json: the CPU study's results still match."""
    recorded = json.loads((REPO / "benchmarks" / "studies" / "ghost-vs-pruned" / "budget.json").read_text())
    assert {**study.budget_record(study.PROTOCOLS["cpu"]["budget"]), "model": "all-MiniLM-L6-v2"} == recorded
    assert study.budget_record(study.PROTOCOLS["medium"]["budget"])["task_samples"] == {"sst2": 8000}


@pytest.mark.slow  # the medium protocol on tiny data: 94 s; every day the tiny study runs and resumes
def test_a_tiny_medium_study_records_the_ghost_rate_and_the_drift(study, glue, tmp_path):
    model = tiny_checkpoint(tmp_path / "tiny")
    results, work = tmp_path / "results", tmp_path / "work"
    args = ["--protocol", "medium", "--model", str(model), "--dataset", str(glue), "--tasks", "sst2,rte",
            "--widths", "1/2", "--seeds", "0", "--grid", "ghost-lr", "--grid", "lr-sweep", "--train-samples", "16", "--epochs", "1",
            "--results", str(results), "--work", str(work), "--keep"]
    assert study.main(args) == 0
    rows = study.read_results(results / "results.jsonl")
    arms = {(r["task"], r["arm"]): r for r in rows}
    medium = ["teacher", "pruned", "ghost", "ghost-lr10", "zero-scale-lr10"]
    sweep = ("ghost-lr30", "ghost-lr100")  # the sweep's x10 is the ghost-lr arm
    assert sorted(arms) == sorted([("rte", a) for a in medium] + [("sst2", a) for a in (*medium, *sweep)])
    budget = json.loads((results / "budget.json").read_text())
    assert (budget["train_samples"], budget["distill_epochs"]) == (16, 1) and "ghost_lr_multiplier" not in budget
    assert "task_samples" not in budget  # --train-samples sets every task's
    for task in ("sst2", "rte"):
        pruned, ghost, fast = arms[(task, "pruned")], arms[(task, "ghost")], arms[(task, "ghost-lr10")]
        assert pruned["kernel_drift"] is None and pruned["weight_drift"] > 0
        assert ghost["weight_drift"] > 0 and fast["kernel_drift"] > 3 * ghost["kernel_drift"] > 0
        assert fast["ghost_lr"] == 10.0 and "ghost_lr" not in ghost
        assert arms[(task, "zero-scale-lr10")]["ghost"] == {"init": "zero-scale"}
    assert arms[("sst2", "ghost-lr100")]["kernel_drift"] > arms[("sst2", "ghost-lr30")]["kernel_drift"]
    # the stages trained the kernels at the multiple of their own rate
    final = work / "sst2-s0" / "arms" / "ghost-lr100@1of2" / "final" / "training.json"
    rates = json.loads(final.read_text())["learning_rates"]
    assert rates == {"lr": pytest.approx(1e-4), "ghost_lr": pytest.approx(1e-2)}
    table = (results / "table.md").read_text()
    assert "| sst2 | ghost-lr10 | 1/2 | ×10 |" in table and "| rte | pruned | 1/2 | – | – |" in table
    assert "| ghost-lr100 | 1/2 | sst2 |" in table  # the paired intervals of the variants, shared with the CPU study
