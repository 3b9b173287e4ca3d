"""``compress`` in stages and on a budget stated in time: each stage scores, prunes and distils the model so far,
the teacher's outputs are computed once for every stage, a time budget sizes the stages and writes the counts it
chose, and those counts train the same bytes again."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model
from ghostify.recipe import compress as compress_module
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import run_cli


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages")
    tiny_checkpoint(root / "model")
    write_toy_dataset(root / "toy", train=64, validation=24)
    return root


@pytest.fixture
def fixed_latency(tmp_path, monkeypatch):
    """A latency model of fixed costs (a tiny model's measured costs are near the timer's noise)."""
    from ghostify.latency_model import LatencyModel

    latency_step = importlib.import_module("ghostify.steps.latency")

    def fixed(config, geometry, deployment, machine, **kwargs):
        return LatencyModel(geometry, deployment, machine, base_ms=1.0, layer_ms=0.1, head_ms=0.5, neuron_ms=0.01)

    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(latency_step, "measure", fixed)


def _args(world: Path, out: Path, *extra: str) -> list:
    return ["compress", world / "model", "-o", out, "--dataset", world / "toy", "--text-columns", "sentence",
            "--label-column", "label", "--max-length", "32", "--importance-samples", "16", "--rounds", "3",
            "--runtime", "pytorch", "--no-drop-layers", "--no-prune-hidden", *extra]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_model(path).state_dict()


def test_two_stages_prune_distil_score_again_and_prune_further(world, tmp_path, capsys, fixed_latency):
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, *_args(world, out, "--speedup", "1.3", "--stages", "2", "--max-samples", "32"))
    assert code == 0, err
    names = sorted(p.name.split("-", 1)[1] for p in (out / "stages").iterdir() if p.is_dir() and p.name[0].isdigit())
    for stage in ("importance", "prune", "distill", "importance-2", "prune-2", "distill-2", "final"):
        assert stage in names, names
    report = json.loads((out / "report.json").read_text())
    steps = report["compression_stages"]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["target"] == pytest.approx(1.3 ** 0.5) and steps[1]["target"] == pytest.approx(1.3)
    assert (out / "allocation-1.json").is_file() and (out / "allocation-2.json").is_file()
    final = next(p for p in (out / "stages").iterdir() if p.name.endswith("-final"))
    history = [h["command"] for h in load_model(final).config.ghostify["history"]]
    assert history.count("prune") == 2 and history.count("distill") == 2 and history[-1] == "finetune"
    # the second stage scored the distilled model: its scores are of the first stage's output
    second = json.loads((out / "allocation-2.json").read_text())
    first = json.loads((out / "allocation-1.json").read_text())
    assert second["settings"]["step"] == 2 and second["settings"]["before"][0]["target"] == first["allocated_for"]
    # one store of the teacher's outputs served every training stage: the later ones computed nothing new
    rows = {row["stage"]: row for row in report["training"]}
    assert rows["distill"]["teacher_outputs"]["computed"] > 0
    assert rows["distill-2"]["teacher_outputs"]["computed"] == 0
    assert rows["final"]["teacher_outputs"]["computed"] == 0
    assert "Compression in 2 stages" in (out / "report.md").read_text()


def test_without_training_the_stages_score_prune_and_tune_again_without_distilling(world, tmp_path, capsys,
                                                                                   fixed_latency):
    """--budget none --stages 2 (K-prune's iterative search): the second stage scores the first's pruned and tuned
    model and prunes it the rest of the way, with mask tuning at each stage and no training stage at all."""
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, *_args(world, out, "--speedup", "1.3", "--stages", "2", "--budget", "none"))
    assert code == 0, err
    names = sorted(p.name.split("-", 1)[1] for p in (out / "stages").iterdir() if p.is_dir() and p.name[0].isdigit())
    assert {"importance", "prune", "importance-2", "prune-2"} <= set(names), names
    assert not [n for n in names if "distill" in n or "finetune" in n or n == "final"], names
    report = json.loads((out / "report.json").read_text())
    assert report["retraining_free"] and [s["target"] for s in report["compression_stages"]] == \
        [pytest.approx(1.3 ** 0.5), pytest.approx(1.3)]
    second = next(p for p in (out / "stages").iterdir() if p.name.endswith("-prune-2"))
    history = load_model(second).config.ghostify["history"]
    assert [h["command"] for h in history].count("prune") == 2
    assert all(h["arguments"]["tuned"]["examples"] > 0 for h in history if h["command"] == "prune")
    assert report["model_dir"].endswith(second.name)


@pytest.fixture
def on_target(monkeypatch):
    """Every timing measures what was predicted: two runs compared byte for byte must not re-allocate differently
    because the machine was busier during one of them."""
    from ghostify.steps.latency_plan import predicted_speedup

    def measure(dense, compressed, deployment, rounds, **kwargs):
        model = Path(compressed)
        stages = next(p for p in model.parents if any(q.name.endswith("-latency") for q in p.iterdir()))
        latency = next(p for p in stages.iterdir() if p.name.endswith("-latency"))
        m = predicted_speedup(model, latency) if (model / "config.json").is_file() else 1.2  # a graph: as targeted
        return {"clock": "cpu", "dense_ms": m, "compressed_ms": 1.0, "measured": m, "measured_low": m,
                "measured_high": m, "rounds": rounds, "wall_ms": {"dense": m, "compressed": 1.0},
                "cpu_ms": {"dense": m, "compressed": 1.0}}

    monkeypatch.setattr(compress_module, "_measure", measure)


def test_a_time_budget_writes_its_counts_and_they_train_the_same_bytes_again(world, tmp_path, capsys, monkeypatch,
                                                                             fixed_latency, on_target):
    """From 4x a time budget takes two stages only where the second's scoring would not cost more than its
    distillation gets: the first stage predicted to take the whole budget (as 256-token SQuAD windows took half of
    20 minutes), the run takes one stage and says why, instead of refusing once the first stage is spent."""
    from ghostify.recipe import compress_settings, time_budget
    from ghostify.training.teacher_store import fingerprint

    monkeypatch.setattr(compress_settings, "STAGED_FROM", 2.0)  # the tiny model reaches 2.2x, not 4x
    monkeypatch.setattr(time_budget, "FIRST_STAGE_SECONDS", 60.0)
    # --mixed-precision auto on a machine with bf16 in hardware times both precisions; here bf16 runs the teacher
    # twice as fast and the student half as fast (the tiny model's own times are near the timer's noise)
    monkeypatch.setattr(compress_settings, "fast_bf16", lambda: True)
    probed, first = compress_module.training_throughput, {}

    def timed(*args, precision, **kwargs):  # and the store pays: its own work costs next to nothing
        rates = first.setdefault("rates", dataclasses.replace(probed(*args, precision=precision, **kwargs),
                                                              storing=1e-6, reading=1e-6))
        rates = dataclasses.replace(rates, teacher=max(rates.teacher, 1e-4))
        if precision == "no":
            return rates
        return dataclasses.replace(rates, teacher=rates.teacher / 2, distill=2 * rates.distill,
                                   finetune=2 * rates.finetune)

    monkeypatch.setattr(compress_module, "training_throughput", timed)
    timed = tmp_path / "timed"
    code, _, err = run_cli(capsys, *_args(world, timed, "--speedup", "2.2", "--budget", "60s"))
    assert code == 0, err
    assert "1 compression stage, not the 2 the target calls for" in err
    budget = json.loads((timed / "budget.json").read_text())
    assert len(budget["distill"]) == 1 and budget["finetune"]["epochs"] >= 1
    report = json.loads((timed / "report.json").read_text())
    assert [s["target"] for s in report["compression_stages"]] == [pytest.approx(2.2)]
    assert report["stage_count"]["stages"] == 1 and report["stage_count"]["by_target"] == 2
    assert "1 compression stage, not the 2 the target calls for" in (timed / "report.md").read_text()
    assert report["time"]["budget_seconds"] == 60 and report["time"]["seconds"] > 0
    assert "distillation on" in err and "of 60 s" in err
    # whether the store pays was measured (a tiny teacher's pass is about as fast as the store's own work: either),
    # and the budget file and the report say what was chosen
    choice = report["teacher_store"]
    assert budget["teacher_store"] is choice["stored"] and choice["teacher_ms"] > 0 and choice["storing_ms"] > 0
    said = "were stored and read back" if choice["stored"] else "were computed at every step, not stored"
    assert f"The teacher's outputs {said}: on this machine storing" in (timed / "report.md").read_text()
    # the fine-tune is planned again once the distillation has run, and what it trains is what budget.json says
    assert "the fine-tune planned again after the last distillation" in err
    # a time budget's student trains without dropout (the teacher's own fine-tune would keep the model's)
    for stage in ("distill", "final"):
        config = json.loads((next((timed / "stages").glob(f"*-{stage}")) / "config.json").read_text())
        arguments = config["ghostify"]["history"][-1]["arguments"]
        assert arguments["dropout"] == arguments["attention_dropout"] == 0.0, stage
    assert "The student trained without dropout" in (timed / "report.md").read_text()
    # where it trained (the GPU's name on a GPU machine), in the precision it trained in
    from ghostify.device import training_device_name

    assert report["trained_on"] == training_device_name() != ""
    assert "stage 1: the teacher's passes in bf16, the student's steps in float32 (timed here" in err
    assert f"Training ran on {report['trained_on']}; the throughput probe timed bf16 against float32" in \
        (timed / "report.md").read_text()
    assert "- stage 1: the teacher in bf16, the student in float32 (bf16 " in (timed / "report.md").read_text()
    for counts in (budget["distill"][0], budget["finetune"]):
        assert counts["mixed_precision"] == "no" and counts["teacher_precision"] == "bf16", counts
    for stage in ("distill", "final"):
        settings = json.loads((next((timed / "stages").glob(f"*-{stage}")) / "training.json").read_text())["settings"]
        assert settings["mixed_precision"] == "no" and settings["teacher_precision"] == "bf16", stage
    # the teacher's outputs are stored under a key of the precision they were computed in
    assert report["teacher_store"]["stored"]
    assert (timed / "stages" / compress_module.TEACHER_STORE / fingerprint(report["teacher"], "bf16")).is_dir()
    # its labelled fine-tune competes with the distilled student it starts from (evaluated first, at step 0)
    final = next((timed / "stages").glob("*-final"))
    assert json.loads((final / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]["evaluate_first"]
    assert json.loads((final / "training.json").read_text())["evaluations"][0]["step"] == 0
    record = json.loads((timed / "allocation.json").read_text())
    assert record["finetune"] == budget["finetune"] and record["finetune_after_distilling"]["pace"] > 0
    again = tmp_path / "again"
    code, _, err = run_cli(capsys, *_args(world, again, "--speedup", "2.2", "--budget", str(timed / "budget.json")))
    assert code == 0, err
    first, second = _weights(Path(report["model_dir"])), _weights(Path(json.loads(
        (again / "report.json").read_text())["model_dir"]))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_a_time_budget_computes_the_teacher_at_every_step_where_storing_does_not_pay(world, tmp_path, capsys,
                                                                                       monkeypatch, fixed_latency,
                                                                                       on_target):
    """Where the first stage's probe finds storing a text's outputs and reading them back slower than the teacher's
    pass (an NVIDIA H200 distilled SST-2's 6x student at 0.36k texts/s storing, 1.7k computing the teacher at every
    step), the run says so, plans and trains without a store, and says it in budget.json and report.md; that
    budget.json trains the same bytes again without a store, and the plan's rates pay the teacher at every visit."""
    from ghostify.recipe.compress import TEACHER_STORE

    probed = compress_module.training_throughput

    def slow_store(*args, **kwargs):  # the store's own work 10 ms + 5 ms a text, inside the probe's epochs as measured
        rates = probed(*args, **kwargs)
        return dataclasses.replace(rates, storing=0.01, reading=0.005, teacher=rates.teacher + 0.01 - 0.005,
                                   distill=rates.distill + 0.005)

    monkeypatch.setattr(compress_module, "training_throughput", slow_store)
    timed = tmp_path / "timed"
    code, _, err = run_cli(capsys, *_args(world, timed, "--speedup", "1.3", "--budget", "40s"))
    assert code == 0, err
    assert "the teacher's outputs are computed at every step, not stored: here storing a text's outputs and reading " \
           "them back take 10.00 + 5.00 ms, more than the teacher's pass" in err
    budget = json.loads((timed / "budget.json").read_text())
    report = json.loads((timed / "report.json").read_text())
    assert budget["teacher_store"] is False and report["teacher_store"]["stored"] is False
    assert not (timed / "stages" / TEACHER_STORE).exists()
    _computed_at_every_step(timed)
    assert "The teacher's outputs were computed at every step, not stored" in (timed / "report.md").read_text()
    record = json.loads((timed / "allocation.json").read_text())
    assert record["teacher_store"]["stored"] is False and record["throughput"]["teacher"] == 0  # no first-visit cost
    again = tmp_path / "again"
    code, _, err = run_cli(capsys, *_args(world, again, "--speedup", "1.3", "--budget", str(timed / "budget.json")))
    assert code == 0, err
    assert not (again / "stages" / TEACHER_STORE).exists()
    first, second = _weights(Path(report["model_dir"])), _weights(Path(json.loads(
        (again / "report.json").read_text())["model_dir"]))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_a_time_budget_without_a_store_plans_for_the_teacher_at_every_step(world, tmp_path, capsys, fixed_latency,
                                                                          on_target):
    """``--teacher-store-gb 0``: no store, and the plan's rates pay the teacher's pass at every visit (no first-visit
    premium), as the budget file says."""
    from ghostify.recipe.compress import TEACHER_STORE

    out = tmp_path / "no-store"
    code, _, err = run_cli(capsys, *_args(world, out, "--speedup", "1.3", "--budget", "40s", "--teacher-store-gb", "0"))
    assert code == 0, err
    record = json.loads((out / "allocation.json").read_text())
    assert record["throughput"]["teacher"] == 0 and record["throughput"]["storing"] == 0
    assert "teacher_store" not in record and json.loads((out / "budget.json").read_text())["teacher_store"] is False
    assert not (out / "stages" / TEACHER_STORE).exists()
    _computed_at_every_step(out)


def _computed_at_every_step(out: Path) -> None:
    """No training stage of the run kept a store of its own either (a stage's default keeps one in its OUT.partial
    when it trains more than one epoch)."""
    rows = json.loads((out / "report.json").read_text())["training"]
    assert rows and all(row["teacher_outputs"] is None for row in rows), rows


def test_an_interrupted_staged_run_resumes_to_the_same_bytes(world, tmp_path, capsys, fixed_latency, on_target,
                                                            monkeypatch):
    args = ("--speedup", "1.3", "--stages", "2", "--max-samples", "32")
    whole = tmp_path / "whole"
    code, _, err = run_cli(capsys, *_args(world, whole, *args))
    assert code == 0, err
    real = compress_module.run_recipe
    calls = []

    def interrupted(recipe, run_dir, **kwargs):
        calls.append(recipe)
        if any(s.name == "final" for s in recipe.stages):  # the last call: stage 2 allocated, nothing of it trained
            raise KeyboardInterrupt
        return real(recipe, run_dir, **kwargs)

    monkeypatch.setattr(compress_module, "run_recipe", interrupted)
    resumed = tmp_path / "resumed"
    code, _, err = run_cli(capsys, *_args(world, resumed, *args))
    assert code != 0 and calls
    monkeypatch.setattr(compress_module, "run_recipe", real)
    code, _, err = run_cli(capsys, *_args(world, resumed, *args))
    assert code == 0, err
    assert "the allocation of stage 1 of the earlier run" in err
    a = _weights(Path(json.loads((whole / "report.json").read_text())["model_dir"]))
    b = _weights(Path(json.loads((resumed / "report.json").read_text())["model_dir"]))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("extra, message", [
    (["--stages", "0"], "--stages 0 must be a whole number from 1 to 6"),
    (["--budget", "0m"], "no time at all"),
    (["--budget", "20m", "--epochs", "2"], "chooses the examples and epochs of every stage itself"),
    (["--budget", "none", "--unlabelled", "x.txt"], "--unlabelled x.txt is not a file"),
    (["--mixed-precision", "int4"], "--mixed-precision 'int4': choose one of auto, no, fp16, bf16"),
    (["--masked-copies", "-1"], "--masked-copies -1 must be a whole number of 0 or more"),
    (["--budget", "none", "--masked-copies", "1"], "--budget none trains nothing, so --masked-copies has nothing"),
], ids=["stages-0", "no-time", "timed-epochs", "unlabelled-missing", "precision", "copies-negative", "copies-none"])
def test_bad_stage_and_budget_settings_are_one_line(world, tmp_path, capsys, extra, message):
    code, _, err = run_cli(capsys, *_args(world, tmp_path / "out", "--speedup", "1.5", *extra))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_compress_ships_in_openvino_int8(world, tmp_path, capsys, fixed_latency, on_target):
    """The export stage is the runtime's own (OpenVINO's IR, NNCF int8 calibrated on the task's examples), and the
    shipped graph is scored and timed in it."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    out = tmp_path / "out"
    args = [a for a in _args(world, out, "--speedup", "1.2", "--budget", "none") if a not in ("--runtime", "pytorch")]
    code, _, err = run_cli(capsys, *args, "--runtime", "openvino-int8")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["shipped"].endswith("openvino/model_int8.xml") and Path(report["shipped"]).is_file()
    assert report["shipped_metrics"]["accuracy"] >= 0


def test_compress_a_sentence_embedding_model_on_a_time_budget_and_again_from_its_budget_file(
        tmp_path, capsys, monkeypatch, fixed_latency, on_target):
    """Issue 48: the original is the teacher (no fine-tune), the scores are label-free, the last distillation (its
    pooled embedding against the teacher's) is the result, exported with its sentence-transformers layout, and the
    report states Spearman of both. With no labelled fine-tune, a time budget's budget.json says so (``finetune``
    null) and the report too, and that budget.json trains the same bytes again (it was refused as "not a budget a
    compress run wrote"). Its last distillation has a deadline (here already passed, as on a machine that slowed
    after it was timed): it stops after the fewest steps worth running, says so, and budget.json records the step."""
    from ghostify.recipe import time_budget
    from ghostify.testing import tiny_sentence_transformer, write_toy_pairs

    monkeypatch.setattr(time_budget, "FIRST_STAGE_SECONDS", 10.0)
    deadline = compress_module._Clock.deadline
    monkeypatch.setattr(compress_module._Clock, "deadline",
                        lambda clock, evaluation: dataclasses.replace(deadline(clock, evaluation), at=0.0))
    model = tiny_sentence_transformer(tmp_path / "st")
    pairs = write_toy_pairs(tmp_path / "pairs", train=48, validation=24)

    def args(out: Path, budget: str) -> list:  # shipped in ONNX Runtime int8, the default: its graph is scored too
        return ["compress", model, "-o", out, "--task", "embeddings", "--dataset", pairs, "--text-columns",
                "sentence1,sentence2", "--label-column", "label", "--max-length", "32", "--speedup", "1.2",
                "--importance-samples", "16", "--rounds", "3", "--no-drop-layers", "--budget", budget]

    timed = tmp_path / "timed"
    code, _, err = run_cli(capsys, *args(timed, "30s"))
    assert code == 0, err
    report = json.loads((timed / "report.json").read_text())
    assert "spearman" in report["metrics"] and "spearman" in report["teacher_metrics"]
    assert report["shipped"].endswith("model_int8.onnx") and "spearman" in report["shipped_metrics"]
    names = {p.name.split("-", 1)[1] for p in (timed / "stages").iterdir() if p.is_dir() and p.name[0].isdigit()}
    assert "teacher" not in names and "final" in names and "hf" in names  # no fine-tune of a teacher, nor of labels
    hf = next(p for p in (timed / "stages").iterdir() if p.name.endswith("-hf"))
    assert (hf / "modules.json").is_file()
    history = [h["command"] for h in load_model(Path(report["model_dir"])).config.ghostify["history"]]
    assert history[-1] == "distill" and "finetune" not in history
    budget = json.loads((timed / "budget.json").read_text())
    assert len(budget["distill"]) == 1 and budget["finetune"] is None and "finetune" not in budget["seconds"]
    assert "no labelled fine-tune: the last distillation is the result" in (timed / "report.md").read_text()
    assert budget["distill"][0]["stop_step"] == time_budget.MIN_STEPS
    assert f"the last training stage stopped at step {time_budget.MIN_STEPS} of its" in err
    assert "stopped at the budget's deadline" in (timed / "report.md").read_text()
    again = tmp_path / "again"
    code, _, err = run_cli(capsys, *args(again, str(timed / "budget.json")))
    assert code == 0, err
    first, second = (_weights(Path(json.loads((out / "report.json").read_text())["model_dir"])) for out in (timed, again))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_the_throughput_probe_times_the_training_loop_and_writes_nothing_it_reads(world, tmp_path, monkeypatch):
    """The probe trains through :func:`ghostify.training.loop.train` (two epochs of distillation, the first also
    storing the teacher's outputs, then one of the fine-tune reading them back), in a directory of its own."""
    from ghostify.settings import DataSettings, TaskSettings
    from ghostify.steps import throughput

    runs: list[tuple[str, int, bool]] = []
    train = throughput.train

    def recorded(objective, rows, collate, settings, output, save_student, **kwargs):
        runs.append((type(objective).__name__, settings.epochs, objective.store is not None))
        return train(objective, rows, collate, settings, output, save_student, **kwargs)

    monkeypatch.setattr(throughput, "train", recorded)
    before = {p: p.read_bytes() for p in (world / "model").iterdir()}
    data = DataSettings(dataset=str(world / "toy"), text_columns=("sentence",), label_column="label", max_length=32)
    rates = throughput.training_throughput(world / "model", world / "model", data, TaskSettings(), examples=48)
    assert runs == [("DistillObjective", 2, True), ("FinetuneObjective", 1, True)]
    for name in ("teacher", "distill", "finetune", "evaluate"):
        assert 0 <= getattr(rates, name) < 1, rates  # seconds per example of a tiny model
    assert rates.distill > 0 and rates.finetune > 0 and rates.evaluate > 0
    assert rates.rows == 1 and rates.per_step() == 32  # a text is a row: a step of 32 rows covers 32 texts
    assert rates.storing > 0 and rates.reading > 0  # the store's own work, timed apart from the teacher's pass
    assert {p: p.read_bytes() for p in (world / "model").iterdir()} == before
    # on an accelerator an untimed epoch of distillation first pays its first uses of kernels and shapes
    runs.clear()
    monkeypatch.setattr(throughput, "default_device", lambda: torch.device("cuda"))
    throughput.training_throughput(world / "model", world / "model", data, TaskSettings(), examples=48)
    assert runs == [("DistillObjective", 1, True), ("DistillObjective", 2, True), ("FinetuneObjective", 1, True)]


def test_the_probe_counts_a_sentence_pairs_two_texts_as_two_rows_of_a_step(tmp_path):
    """The embeddings task trains on each text of a pair as a row of its own: a step of 32 rows covers 16 pairs, and
    a time budget's plan cuts its last epoch at a step counted so (it counted 32 pairs a step, and trained 0.92 of
    the one and 151/180 epochs it planned on STS-B)."""
    from ghostify.recipe.time_budget import StageCounts, Throughput, distill_counts
    from ghostify.settings import DataSettings, TaskSettings
    from ghostify.steps.throughput import training_throughput
    from ghostify.testing import tiny_sentence_transformer, write_toy_pairs

    model = tiny_sentence_transformer(tmp_path / "st")
    pairs = write_toy_pairs(tmp_path / "pairs", train=48, validation=24)
    data = DataSettings(task="embeddings", dataset=str(pairs), text_columns=("sentence1", "sentence2"),
                        label_column="label", max_length=32)
    rates = training_throughput(model, model, data, TaskSettings(), examples=48)
    assert rates.rows == 2 and rates.per_step() == 16
    # 1,000 pairs: 63 steps an epoch of 16 pairs; 9 s = 1 epoch (1,000 x (0.004 + 0.002) = 6 s) and 3 s of a
    # second (a whole one: 4 s): 3 / (0.004 x 16) = 46 steps (of 63)
    counts, cost, _ = distill_counts(9.0, 1000, 0, Throughput(teacher=0.002, distill=0.004, finetune=0.004,
                                                              evaluate=0.001, rows=2))
    assert counts == StageCounts(None, 2, 63 + 46) and cost == pytest.approx(6 + 46 * 16 * 0.004)
    assert counts.describe(1000, 16) == "1,000 x 1 epoch and 46 of 63 steps of one more"
    assert counts.examples(1000, 16) == 1000 + 46 * 16
