"""``ghostify compress``: the recipe it runs is the shipped one, the measured check corrects a missed
allocation once, and the whole chain runs on a tiny model with a report."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ghostify import recipe as recipes
from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment
from ghostify.recipe import compress as compress_module
from ghostify.recipe.compress import compress_recipe
from ghostify.recipe.schema import validate
from ghostify.recipe.yaml_source import RecipeSource
from ghostify.settings import BUDGETS
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import REPO, run_cli


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("compress")
    tiny_checkpoint(root / "model")
    write_toy_dataset(root / "toy", train=48, validation=24)
    return root


def _stages(recipe) -> list[tuple[str, str, dict]]:
    return [(s.name, s.command.name, s.settings) for s in recipe.stages]


def test_compress_runs_the_stages_of_the_shipped_recipe(world):
    shipped = recipes.load(REPO / "recipes" / "compress.yaml", [f"model={world / 'model'}"])
    raw = compress_recipe(str(world / "model"), speedup=2, deployment=Deployment(), budget=BUDGETS["quick"],
                          data={"dataset": "nyu-mll/glue", "task": "sst2"}, ghosts=False, teacher="${model}", seed=0)
    generated = validate(RecipeSource(yaml.safe_dump(raw, sort_keys=False), "compress"), raw)
    assert _stages(generated) == _stages(shipped)
    assert generated.left_out == shipped.left_out == ["05-attach-ghost"]


def test_compress_without_training_runs_the_stages_of_the_retraining_free_recipe(world):
    shipped = recipes.load(REPO / "recipes" / "retraining-free.yaml", [f"model={world / 'model'}"])
    raw = compress_recipe(str(world / "model"), speedup=1.5, deployment=Deployment(), budget=BUDGETS["none"],
                          data={"dataset": "nyu-mll/glue", "task": "sst2"}, ghosts=False, teacher="${model}", seed=0)
    generated = validate(RecipeSource(yaml.safe_dump(raw, sort_keys=False), "compress"), raw)
    assert _stages(generated) == _stages(shipped)
    assert not any(s.command.trains for s in generated.stages)


def test_a_model_without_a_head_gets_a_teacher_stage_first(world):
    raw = compress_recipe(str(world / "model"), speedup=2, deployment=Deployment(runtime="pytorch"),
                          budget=BUDGETS["quick"], data={"task": "sst2"}, ghosts=True, teacher=None, seed=3)
    recipe = validate(RecipeSource(yaml.safe_dump(raw, sort_keys=False), "compress"), raw)
    names = [s.name for s in recipe.stages]
    assert names[:2] == ["latency", "teacher"] and "attach-ghost" in names  # the latency model needs no training
    assert "onnx" not in names and "shipped-eval" not in names  # pytorch ships the checkpoint itself
    assert recipe.stages[1].settings["max_samples"] == BUDGETS["quick"].max_samples
    assert all(s.settings.get("seed", 3) == 3 for s in recipe.stages)


def _toy_args(world: Path, out: Path, *extra: str) -> list:
    return ["compress", world / "model", "-o", out, "--dataset", world / "toy", "--text-columns", "sentence",
            "--label-column", "label", "--max-length", "32", "--max-samples", "32", "--importance-samples", "16",
            "--rounds", "3", *extra]


@pytest.mark.parametrize("args, expected", [
    (["--speedup", "1"], "--speedup 1.0 must be a finite number above 1"),
    (["--speedup", "2", "--runtime", "tensorrt"], "unknown --runtime 'tensorrt'"),
    (["--speedup", "2", "--budget", "huge"], "unknown --budget 'huge'"),
    (["--speedup", "2", "--threads", "0"], "--threads 0 must be a whole number of at least 1"),
    (["--speedup", "2", "--label-column", "nope"], "has no labels in column 'nope'"),
], ids=["speedup-1", "runtime", "budget", "threads", "label-column"])
def test_bad_settings_are_one_line_before_anything_runs(world, tmp_path, capsys, args, expected):
    code, out, err = run_cli(capsys, *_toy_args(world, tmp_path / "out", *args))
    assert code == 2
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_missed_speedup_is_reallocated_once_with_the_measured_correction(world, tmp_path, monkeypatch):
    """Measured 1.5x where 2.0x was predicted: the second allocation asks for 2 x 2.0 / 1.5."""
    allocations = []

    def fake_measure(recipe, run_dir, deployment, rounds, say, dense_exports=None, allocated=None, k=1):
        speedup = recipe.stages[[s.name for s in recipe.stages].index("prune")].settings["speedup"]
        allocations.append(speedup)
        measured = 1.5 if len(allocations) == 1 else 2.02
        return {"allocated_for": speedup, "predicted": 2.0 if len(allocations) == 1 else speedup, "measured": measured,
                "dense_ms": 2.0, "compressed_ms": 2.0 / measured, "measured_low": measured, "measured_high": measured,
                "rounds": rounds}

    ran = []
    monkeypatch.setattr(compress_module, "_check_reachable", lambda *a: None)
    monkeypatch.setattr(compress_module, "_choose", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_structure", lambda *a: (None, None))
    monkeypatch.setattr(compress_module, "_allocate_and_measure", fake_measure)
    monkeypatch.setattr(compress_module, "run_recipe", lambda recipe, run_dir, **kwargs: ran.append(recipe))
    monkeypatch.setattr(compress_module, "_measure", lambda *a, **k: {"measured": 2.02, "dense_ms": 2.0,
                                                                        "compressed_ms": 0.99, "measured_low": 2.0,
                                                                        "measured_high": 2.1})
    monkeypatch.setattr(compress_module, "_report", lambda *a, **k: {"measured_speedup": 2.02, "attempts": a[2]})
    monkeypatch.setattr(compress_module, "_write_report", lambda out, report: None)
    lines = []
    report = compress_module.compress(world / "model", tmp_path / "out", speedup=2,
                                      data=compress_module.DataSettings(dataset=str(world / "toy"), text_columns=("sentence",),
                                                                        label_column="label"),
                                      teacher=str(world / "model"), say=lines.append)
    assert allocations == [2, pytest.approx(2 * 2.0 / 1.5)]
    assert len(report["attempts"]) == 2
    assert any("re-allocating for a predicted" in line for line in lines)
    prune = next(s for s in ran[-1].stages if s.name == "prune")
    assert prune.settings["speedup"] == pytest.approx(2 * 2.0 / 1.5)  # the training runs on the corrected allocation


#: what a fake allocation measures per kept layers: its measured / predicted ratio and the most it can be
#: allocated for (a tiny latency model errs by structure, as MiniLM's does: 2 layers slower than predicted)
STRUCTURES = {"0,1": (0.75, 2.5), "1": (1.1, 4.0)}


def _fake_structural_measure(allocations: list, reach: dict | None = None) -> Any:
    def fake_measure(recipe, run_dir, deployment, rounds, say, dense_exports=None, allocated=None, k=1):
        layers = next(s.settings["layers"] for s in recipe.stages if s.name == "drop-layers")
        ratio, most = (reach or STRUCTURES)[layers]
        if allocated > most:
            raise GhostifyError(f"a predicted {allocated:.2f}x is out of reach for layers {layers}")
        allocations.append((layers, allocated))
        measured = allocated * ratio
        return {"allocated_for": allocated, "predicted": allocated, "measured": measured, "dense_ms": 2.0,
                "compressed_ms": 2.0 / measured, "measured_low": measured, "measured_high": measured,
                "rounds": rounds}
    return fake_measure


@pytest.mark.parametrize("case", ["same-layers", "replanned", "replan-fails"])
def test_a_miss_with_whole_layers_replans_them_only_when_the_same_layers_cannot_reach_it(world, tmp_path,
                                                                                        monkeypatch, case):
    """Issue 38: at 6x, 2 layers measured 5.21x for 6.24x predicted and the correction (7.18x) was beyond what
    2 layers reach, so the first allocation shipped. The correction keeps the layers when they reach it; else
    it re-plans the layers for it and corrects once more with the new layers' own miss; the attempt measured
    closest to the target trains. A re-plan that fails leaves the first allocation."""
    planned_for, allocations, ran = [], [], []
    reach = {"same-layers": {"0,1": (0.75, 3.0), "1": (1.1, 4.0)}, "replanned": STRUCTURES,
             "replan-fails": STRUCTURES}[case]

    def structure(recipe, run_dir, speedup, layers, hidden, say, k=1):
        planned_for.append(speedup)
        if len(planned_for) == 2 and case == "replan-fails":
            raise GhostifyError("a predicted 0.5 ms is out of reach")
        return ([0, 1] if len(planned_for) == 1 else [1]), None

    monkeypatch.setattr(compress_module, "_check_reachable", lambda *a: None)
    monkeypatch.setattr(compress_module, "_choose", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_structure", structure)
    monkeypatch.setattr(compress_module, "_allocate_and_measure", _fake_structural_measure(allocations, reach))
    monkeypatch.setattr(compress_module, "run_recipe", lambda recipe, run_dir, **kwargs: ran.append(recipe))
    monkeypatch.setattr(compress_module, "_measure", lambda *a, **k: {"measured": 2.0})
    monkeypatch.setattr(compress_module, "_report", lambda *a, **k: {"attempts": a[2]})
    monkeypatch.setattr(compress_module, "_write_report", lambda out, report: None)
    lines = []
    compress_module.compress(world / "model", tmp_path / "out", speedup=2, drop_layers=True, prune_hidden=False,
                             teacher=str(world / "model"), say=lines.append,
                             data=compress_module.DataSettings(dataset=str(world / "toy"), text_columns=("sentence",),
                                                               label_column="label"))
    corrected = pytest.approx(2 / 0.75)
    stages = {s.name: s.settings for s in ran[-1].stages}  # what trains
    saved = json.loads((tmp_path / "out" / "allocation.json").read_text())
    kept = [a["kept"] for a in saved["attempts"]]
    if case == "same-layers":  # 0,1 reach 2.67x: kept, allocated for it
        assert planned_for == [2] and allocations == [("0,1", 2), ("0,1", corrected)] and kept == [False, True]
        assert stages["drop-layers"]["layers"] == "0,1" and stages["prune"]["speedup"] == corrected
    elif case == "replanned":  # 0,1 cannot: re-planned (1 layer, measured 2.93x), corrected again on 1 layer
        again = pytest.approx(2 * (2 / 0.75) / (2 / 0.75 * 1.1))
        assert planned_for == [2, corrected]
        assert allocations == [("0,1", 2), ("1", corrected), ("1", again)] and kept == [False, False, True]
        assert stages["drop-layers"]["layers"] == "1" and stages["prune"]["speedup"] == again
        assert saved["keep_layers"] == [1] and saved["allocated_for"] == again
        assert any("planning the layers and channels again" in line for line in lines)
    else:
        assert planned_for == [2, corrected] and allocations == [("0,1", 2)] and kept == [True]
        assert any("the re-allocation failed" in line for line in lines)
        assert stages["drop-layers"]["layers"] == "0,1" and stages["prune"]["speedup"] == 2
        assert saved["keep_layers"] == [0, 1] and saved["allocated_for"] == 2


def test_a_speedup_within_tolerance_is_not_reallocated(world, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(compress_module, "_check_reachable", lambda *a: None)
    monkeypatch.setattr(compress_module, "_choose", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_structure", lambda *a: (None, None))
    monkeypatch.setattr(compress_module, "_allocate_and_measure",
                        lambda recipe, *a: calls.append(1) or {"allocated_for": 2, "predicted": 2.0, "measured": 1.92})
    monkeypatch.setattr(compress_module, "run_recipe", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_measure", lambda *a, **k: {"measured": 1.92})
    monkeypatch.setattr(compress_module, "_report", lambda *a, **k: {"measured_speedup": 1.92})
    monkeypatch.setattr(compress_module, "_write_report", lambda out, report: None)
    compress_module.compress(world / "model", tmp_path / "out", speedup=2, teacher=str(world / "model"),
                             data=compress_module.DataSettings(dataset=str(world / "toy"), text_columns=("sentence",),
                                                               label_column="label"))
    assert calls == [1]  # 1.92 is within 5% of 2


@pytest.fixture
def fixed_latency(tmp_path, monkeypatch):
    """A latency model of fixed costs instead of one timed on this machine: a tiny model's measured head and
    neuron costs are near the timer's noise, so whether 1.1x is reachable would depend on the machine's load."""
    from ghostify.latency_model import LatencyModel

    latency_step = importlib.import_module("ghostify.steps.latency")  # the module, not the function it exports

    def fixed(config, geometry, deployment, machine, **kwargs):
        return LatencyModel(geometry, deployment, machine, base_ms=1.0, layer_ms=0.1, head_ms=0.5, neuron_ms=0.01)

    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))  # nothing measured before, nothing left behind
    monkeypatch.setattr(latency_step, "measure", fixed)


def test_compress_runs_end_to_end_on_a_tiny_model(world, tmp_path, capsys, fixed_latency):
    before = {p: p.read_bytes() for p in world.rglob("*") if p.is_file()}
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, *_toy_args(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    # each stage said once: a prefix of the recipe run again does not report the stages it finds done as skipped
    done = {line.split(":")[0] for line in err.splitlines() if ": done in " in line}
    assert "01-latency" in done and not [line for line in err.splitlines() if line.endswith(": skipped")], err
    report = json.loads((out / "report.json").read_text())
    assert report["target_speedup"] == 1.1 and report["measured_speedup"] > 0
    assert report["allocations"] and report["allocations"][0]["predicted"] >= 1.1 * 0.999
    assert len(report["heads_per_layer"]) == len(report["neurons_per_layer"]) == 2
    assert report["metrics"] and report["teacher_metrics"]
    assert (out / "report.md").read_text().startswith("# ghostify compress")
    assert (out / "speedup.png").stat().st_size > 0
    assert {p: p.read_bytes() for p in world.rglob("*") if p.is_file()} == before  # inputs untouched


def test_a_recipe_with_a_ghost_stage_validates_without_a_serializer_warning(world, tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", REPO / "recipes" / "quickstart.yaml", "-o", tmp_path / "plan", "--dry-run",
                             "--set", f"model={world / 'model'}")
    assert code == 0, err
    assert "Pydantic" not in err and "serializer" not in err


def test_a_recipe_whose_teacher_is_its_model_validates(world):
    recipe = recipes.load(REPO / "recipes" / "compress.yaml", [f"model={world / 'model'}"])
    assert recipe.header.teacher == "${model}"
    assert any(s.command.name == "distill" for s in recipe.stages)


def test_a_speedup_out_of_reach_is_refused_before_any_stage_runs(world, tmp_path, capsys, fixed_latency):
    """50x on a tiny model is refused from the latency model alone (measured into this machine's cache, or read
    from it): before any stage runs, before the teacher is announced, and leaving nothing in OUT."""
    tiny_checkpoint(tmp_path / "bare", head="base")  # no head for the task: compress would fine-tune a teacher
    out = tmp_path / "out"
    args = _toy_args(world, out, "--speedup", "50", "--runtime", "pytorch")
    args[1] = tmp_path / "bare"
    for attempt in ("measured", "cached"):
        code, stdout, err = run_cli(capsys, *args)
        assert code == 2, err
        assert "--speedup 50 is out of reach" in err.strip().splitlines()[-1] and "Traceback" not in err
        assert "teacher is fine-tuned" not in err and "01-latency" not in err, err
        assert not out.exists(), attempt
    assert "measured before on this machine" in err  # the second attempt read the cache


def test_a_rerun_after_a_reallocation_redoes_nothing(world, tmp_path, monkeypatch, capsys, fixed_latency):
    """The first allocation measures 1.2x for 1.1x (9% over): re-allocated once; run again, compress keeps the
    saved allocation and every stage is skipped (no training redone)."""
    speedups = iter([1.2, 1.1, 1.1, 1.1])

    def fake_measure(dense, compressed, deployment, rounds, **kwargs):
        m = next(speedups)
        return {"clock": "cpu", "dense_ms": 1.0, "compressed_ms": 1 / m, "measured": m, "measured_low": m,
                "measured_high": m, "rounds": rounds, "wall_ms": {"dense": 1.0, "compressed": 1 / m},
                "cpu_ms": {"dense": 1.0, "compressed": 1 / m}}

    monkeypatch.setattr(compress_module, "_measure", fake_measure)
    out = tmp_path / "out"
    args = _toy_args(world, out, "--speedup", "1.1", "--runtime", "pytorch")
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["reallocated"] and report["allocations"][1]["allocated_for"] == pytest.approx(1.1 * report["allocations"][0]["predicted"] / 1.2)
    final = (out / "stages").glob("*-final")
    stamps = {p.name: (p / "stage.json").read_text() for p in (out / "stages").iterdir() if (p / "stage.json").is_file()}
    assert next(final).is_dir()
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "the allocation of the earlier run" in err and ": running" not in err
    said = [line.split(":")[0] for line in err.splitlines() if line.endswith(": skipped")]
    assert said and len(said) == len(set(said)), err  # each stage once, though the runner ran prefixes of the recipe
    assert {p.name: (p / "stage.json").read_text() for p in (out / "stages").iterdir()
            if (p / "stage.json").is_file()} == stamps


def _without_training(world: Path, out: Path, *extra: str) -> list:
    """The toy arguments for --budget none, which trains nothing (so takes no --max-samples)."""
    args = _toy_args(world, out, "--budget", "none", *extra)
    at = args.index("--max-samples")
    return args[:at] + args[at + 2:]


def test_compress_without_training_prunes_tunes_and_ships(world, tmp_path, capsys, fixed_latency):
    """--budget none: importance, the search, rearrangement, mask tuning, eval; no distill or finetune stage."""
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, *_without_training(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["retraining_free"] and report["budget"] == "none" and report["metrics"]
    stages = sorted(p.name for p in (out / "stages").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert stages == ["01-latency", "02-teacher-eval", "03-importance", "04-prune", "05-final-eval"]
    history = json.loads((out / "stages" / "04-prune" / "config.json").read_text())["ghostify"]["history"]
    prune = history[-1]["arguments"]
    assert prune["tune_masks"] == BUDGETS["none"].tune_masks and prune["tuned"]["examples"] == 48  # all the toy rows
    assert prune["criterion"] in ("fisher", "loss-gradient")
    assert ("rearranged" in prune) == prune["rearrange"] == (report["choice"]["chosen"] == "fisher+rearranged")
    assert report["model_dir"].endswith("04-prune")
    assert "retraining-free" in (out / "report.md").read_text()
    assert report["choice"]["chosen"] in ("fisher", "fisher+rearranged", "loss-gradient", "uniform")


@pytest.mark.parametrize("extra, flag", [(["--ghosts"], "--ghosts"), (["--epochs", "2"], "--epochs")])
def test_training_settings_are_refused_without_training(world, tmp_path, capsys, extra, flag):
    code, out, err = run_cli(capsys, *_without_training(world, tmp_path / "out", "--speedup", "1.5", *extra))
    assert code == 2 and f"--budget none trains nothing, so {flag} has nothing to set" in err
    assert not (tmp_path / "out").exists()


def test_the_allocation_closest_to_the_teacher_is_kept(world, tmp_path, capsys, fixed_latency, monkeypatch):
    from ghostify.steps import fidelity

    monkeypatch.setattr(fidelity, "teacher_gap", lambda models, *a, **k: [0.5, 0.45, 0.4, 0.25][:len(models)])
    out = tmp_path / "out"
    args = _without_training(world, out, "--speedup", "1.1", "--runtime", "pytorch")
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    choice = report["choice"]
    assert choice["chosen"] == "uniform" and set(choice["gaps"]) == {"fisher", "fisher+rearranged", "loss-gradient",
                                                                     "uniform"}
    assert report["allocations"][-1]["allocation"] == "uniform"
    prune = json.loads((out / "stages" / "04-prune" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    allocation = json.loads((out / "allocation.json").read_text())["prune"]  # the width of the last allocation
    assert prune["width"] == allocation["width"] and prune.get("speedup") is None
    assert "Kept: **uniform width" in (out / "report.md").read_text()
    code, stdout, err = run_cli(capsys, *args)  # again: the choice is kept, nothing runs
    assert code == 0 and "the allocation of the earlier run" in err and ": running" not in err


def _rig_candidates(monkeypatch, metric: dict[str, float]) -> None:
    """The candidates' distances to the teacher (fisher 0.5, fisher+rearranged 0.45, loss-gradient 0.4, uniform
    0.25: uniform closest) and their task metric, ``metric`` by name, on 900 examples (one standard error of 0.9:
    0.01), instead of measured ones."""
    from ghostify.steps import fidelity

    monkeypatch.setattr(fidelity, "teacher_gap", lambda models, *a, **k: [0.5, 0.45, 0.4, 0.25][:len(models)])
    monkeypatch.setattr(fidelity, "task_metric", lambda models, *a, **k: fidelity.MetricScores(
        "accuracy", [metric[Path(m).name] for m in models], 900))


def test_with_labels_the_tasks_metric_decides_and_the_distance_breaks_ties(world, tmp_path, capsys, fixed_latency,
                                                                           monkeypatch):
    """Issue 46: a label-free distance picked the worst arm by accuracy on SST-2 at 1.5x; where the data has
    labels, the candidates are judged by the task's metric on labelled training examples the scores did not read,
    and only those within one standard error of the best are then ranked by their distance to the teacher."""
    from ghostify.steps import fidelity

    names = list(fidelity.candidate_allocations())
    # uniform is closest to the teacher but scores far below; the first-order search leads the rest by more than
    # one standard error, so it is kept though further from the teacher
    metric = {"fisher": 0.7, "fisher+rearranged": 0.5, "loss-gradient": 0.9, "uniform": 0.6}
    _rig_candidates(monkeypatch, metric)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, *_without_training(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    choice = json.loads((out / "report.json").read_text())["choice"]
    assert choice["metric"] == "accuracy" and choice["metrics"] == {n: metric[n] for n in names}
    assert choice["chosen"] == "loss-gradient"
    assert "accuracy on them" in (out / "report.md").read_text()


def test_where_the_run_trains_a_tie_goes_to_a_search_not_the_closer_uniform_width(world, tmp_path, capsys,
                                                                                  fixed_latency, monkeypatch):
    """Issue 46: before training, the SQuAD part's candidates at 3x all scored near F1 10 of 59; the distance then
    kept uniform width, which trained to 40.5 where the rearranged search trained to 50.6. Where the run trains, the
    candidates the metric cannot tell apart go to the latency searches first; uniform width only leads by its metric."""
    # within one standard error of 0.9: every candidate but the first-order search
    metric = {"fisher": 0.895, "fisher+rearranged": 0.9, "loss-gradient": 0.85, "uniform": 0.9}
    _rig_candidates(monkeypatch, metric)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, *_toy_args(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    choice = json.loads((out / "report.json").read_text())["choice"]
    assert choice["searches_first"] and choice["chosen"] == "fisher+rearranged"  # the closer of the tied searches
    assert "the latency searches ahead of uniform width" in (out / "report.md").read_text()
    # without training the pruned model ships as it is: the distance decides the tie
    out = tmp_path / "untrained"
    code, _, err = run_cli(capsys, *_without_training(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    choice = json.loads((out / "report.json").read_text())["choice"]
    assert not choice["searches_first"] and choice["chosen"] == "uniform"
    # uniform width is kept where its metric leads by more than one standard error
    metric["uniform"] = 0.95
    out = tmp_path / "again"
    code, _, err = run_cli(capsys, *_toy_args(world, out, "--speedup", "1.1", "--runtime", "pytorch"))
    assert code == 0, err
    assert json.loads((out / "report.json").read_text())["choice"]["chosen"] == "uniform"


def test_the_tie_break_ranks_by_distance_then_order_and_searches_first_only_when_asked():
    from ghostify.steps.fidelity import tie_break

    gaps = {"fisher": 0.4, "loss-gradient": 0.4, "uniform": 0.1}
    order = ["fisher", "loss-gradient", "uniform"]
    assert sorted(gaps, key=tie_break(gaps, order, searches_first=False)) == ["uniform", "fisher", "loss-gradient"]
    assert sorted(gaps, key=tie_break(gaps, order, searches_first=True)) == ["fisher", "loss-gradient", "uniform"]


def test_task_metric_scores_each_model_on_labelled_training_examples(world, tmp_path):
    from ghostify.steps import fidelity, importance

    importance(world / "model", tmp_path / "scored", dataset=str(world / "toy"), text_columns=("sentence",),
               label_column="label", samples=16)
    from ghostify.methods.pruning import ImportanceScores

    data = ImportanceScores.load(tmp_path / "scored").metadata["data"]
    metric, scores, count, full = fidelity.task_metric([world / "model", world / "model"], data, samples=20, seed=1)
    assert metric == "accuracy" and count == 20 and scores[0] == scores[1] and 0 <= scores[0] <= 1 and full == 1


def test_a_metric_in_percent_has_its_standard_error_in_percent():
    """SQuAD's F1 is in percent: on the SQuAD part at 3x the candidates scored F1 8.1-10.1 on 256 questions, one
    standard error about 1.9 points; read as a share above 1 its error was 0.0006, and the best F1 alone decided."""
    from ghostify.steps.fidelity import MetricScores

    assert MetricScores("f1", [10.0], 256, 100.0).standard_error(10.0) == pytest.approx(100 * (0.1 * 0.9 / 256) ** 0.5)
    assert MetricScores("accuracy", [0.9], 900).standard_error(0.9) == pytest.approx(0.01)
    assert MetricScores("accuracy", [1.0], 100).standard_error(1.0) == pytest.approx(0.001)  # never zero


# ----------------------------------------------------------------------------------------------
# the report's headline is the task's own metric (issue 48)
# ----------------------------------------------------------------------------------------------
def _report(teacher: dict, compressed: dict, main: str | None) -> dict:
    """A report.json as compress writes it (the parts markdown reads), with these validation metrics."""
    attempt = {"allocated_for": 3.0, "predicted": 3.0, "measured": 2.9, "rounds": 5}
    return {"model": "m", "target_speedup": 3.0, "deployment": {}, "measured_speedup": 2.9, "measured_range": [2.8, 3.0],
            "latency_ms": {"dense": 3.0, "compressed": 1.0}, "clock": "cpu", "within_tolerance": True,
            "tolerance": 0.1, "allocations": [attempt], "teacher_metrics": teacher, "metrics": compressed,
            "main_metric": main, "shipped_metrics": compressed, "params": {"teacher": 10, "compressed": 5},
            "flops": {"teacher": 100, "compressed": 40}, "choice": None, "layers": [0, 1],
            "heads_per_layer": [2, 2], "neurons_per_layer": [9, 9], "layers_of": 2,
            "budget_settings": {"max_samples": 100, "epochs": 1, "importance_samples": 16}, "budget": "quick",
            "model_dir": "d", "shipped": "s", "stages_dir": "x"}


def test_the_report_names_the_share_of_the_tasks_own_metric():
    """A held-out CoNLL-2003 run at 3x said "93.7% of the teacher": its precision, the first metric listed, where
    entity F1 kept 94.2% (0.7299 of 0.7747). The headline is the task's own metric, named."""
    from ghostify.recipe.compress_report import markdown

    teacher = {"precision": 0.8000, "recall": 0.7500, "f1": 0.7747, "accuracy": 0.95}
    compressed = {"precision": 0.7496, "recall": 0.7110, "f1": 0.7299, "accuracy": 0.94}
    text = markdown(_report(teacher, compressed, "f1"))
    assert "(f1: 94.2% of the teacher's)" in text and "93.7%" not in text
    assert text.count("of the teacher's") == 2  # the validation row and the shipped row
    # an eval that names no metric (an older run directory): no share at all rather than another metric's
    assert "of the teacher" not in markdown(_report(teacher, compressed, None))


@pytest.mark.parametrize(("kind", "main"), [("classification", "accuracy"), ("tokens", "f1"), ("qa", "f1"),
                                            ("embeddings", "spearman")])
def test_eval_names_the_tasks_own_metric(kind, main, tmp_path):
    """What compress's report reads: eval.json's main_metric is the metric that picks a training run's best epoch
    (the preset's for sentence classification, entity F1 for tagging, F1 for QA, Spearman for STS pairs)."""
    from ghostify import steps
    from ghostify.testing import (tiny_sentence_transformer, write_toy_ner_dataset, write_toy_pairs,
                                  write_toy_squad_dataset)

    if kind == "embeddings":
        model = tiny_sentence_transformer(tmp_path / "m")
        data = {"task": "embeddings", "dataset": str(write_toy_pairs(tmp_path / "d")),
                "text_columns": ("sentence1", "sentence2"), "label_column": "label"}
    else:
        head = {"classification": "sequence-classification", "tokens": "token-classification",
                "qa": "question-answering"}[kind]
        model = tiny_checkpoint(tmp_path / "m", head=head, **({"num_labels": 5} if kind == "tokens" else {}))
        if kind == "classification":
            data = {"dataset": str(write_toy_dataset(tmp_path / "d", train=16, validation=16)),
                    "text_columns": ("sentence",), "label_column": "label"}
        elif kind == "tokens":
            data = {"dataset": str(write_toy_ner_dataset(tmp_path / "d", train=8, validation=8)),
                    "tokens_column": "tokens", "tags_column": "ner_tags"}
        else:
            data = {"dataset": str(write_toy_squad_dataset(tmp_path / "d", train=6, validation=6)),
                    "question_column": "question", "context_column": "context", "answers_column": "answers"}
    result = steps.evaluate(model, **data, max_length=64)
    assert result["main_metric"] == main and main in result["metrics"], result


def test_the_report_says_which_training_stage_cut_its_last_epoch_and_which_a_deadline_stopped():
    from ghostify.recipe.compress_report import markdown

    metrics = {"f1": 0.5}
    store = {"computed": 10, "reused": 5, "bytes": 2**20}
    report = _report(metrics, metrics, "f1") | {"training": [
        {"stage": "distill", "examples": 4196, "epochs": 2, "max_steps": 145, "steps": 145, "precision": "no",
         "teacher_outputs": store},
        {"stage": "final", "examples": 3187, "epochs": 1, "max_steps": None, "steps": 114, "precision": "no",
         "teacher_outputs": store},
        {"stage": "final", "examples": 3187, "epochs": 2, "max_steps": None, "steps": 150, "precision": "no",
         "teacher_outputs": store, "stopped_at": 150, "schedule_steps": 200}]}
    text = markdown(report)
    assert "| distill | 4,196 | 2, the last cut | 145 | float32 |" in text
    assert "| final | 3,187 | 1 | 114 | float32 |" in text
    assert "| final | 3,187 | 2 | 150 of 200: stopped at the budget's deadline | float32 |" in text
