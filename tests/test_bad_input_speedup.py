"""`ghostify prune --speedup X --latency FILE` refused in one line, before any weight is read:
the settings that exclude each other, a speed-up that is no speed-up, a latency model that is
missing, broken or of another shape, and a target out of the latency model's reach."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS

from .conftest import run_cli
from .test_bad_input import _beside, _check_refused, _env, _fill, _snapshot, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")

#: the tiny checkpoints' shape: dense 0.5 + 2 x (0.25 + 4 x 0.25 + 37 x 0.02) = 4.48 ms; at best 1.54 ms (2.91x)
GOOD = LatencyModel(geometry=Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS), deployment=Deployment(), machine="test",
                    base_ms=0.5, layer_ms=0.25, head_ms=0.25, neuron_ms=0.02)


@pytest.fixture(scope="session")
def latencies(tmp_path_factory) -> Path:
    """Latency models, good and bad, each in a directory of its own (as `ghostify latency` writes them)."""
    root = tmp_path_factory.mktemp("bad-speedup")

    def write(name: str, model: LatencyModel | None = None, text: str | None = None) -> None:
        (root / name).mkdir()
        path = root / name / "latency.json"
        path.write_text(text) if text is not None else model.save(path)

    write("good", GOOD)
    write("other-ffn", replace(GOOD, geometry=replace(GOOD.geometry, ffn_size=64)))
    write("other-family", replace(GOOD, geometry=replace(GOOD.geometry, family="RoBERTa")))
    write("other-depth", replace(GOOD, geometry=replace(GOOD.geometry, num_layers=3)))
    write("corrupt", text="{not json")
    write("newer", text=json.dumps({**GOOD.to_dict(), "format": 99}))
    write("incomplete", text=json.dumps({k: v for k, v in GOOD.to_dict().items() if k != "head_ms"}))
    write("free", replace(GOOD, base_ms=0.0, layer_ms=0.0, head_ms=0.0, neuron_ms=0.0))
    (root / "empty").mkdir()
    # each cost finite, their sum not (issue 36, item 10); a cost below 0; timed rows that print nothing sane
    write("huge", replace(GOOD, base_ms=1e308, layer_ms=1e308, head_ms=1e308, neuron_ms=1e308))
    write("negative", replace(GOOD, head_ms=-0.25))
    row = {"name": "dense", "heads": [HEADS] * LAYERS, "neurons": [FFN] * LAYERS, "measured_ms": 4.5, "predicted_ms": 4.48}
    write("row-without-predicted", replace(GOOD, validation=[{k: v for k, v in row.items() if k != "predicted_ms"}]))
    write("row-measured-zero", replace(GOOD, validation=[{**row, "measured_ms": 0}]))
    write("row-widths", replace(GOOD, probes=[{**row, "neurons": [FFN]}]))
    return root


PRUNE = ["prune", "{scored}", "-o", "{out}"]
SPEEDUP = [*PRUNE, "--speedup", "2"]
LATENCY = ["--latency", "<good>"]
CASES: list[tuple[str, list[str], str]] = [
    # the settings that exclude or need each other
    ("speedup-and-width", [*SPEEDUP, *LATENCY, "--width", "0.5"], "--speedup and --width are mutually exclusive"),
    ("speedup-and-heads-width", [*SPEEDUP, *LATENCY, "--heads-width", "0.5"], "--speedup and --heads-width are"),
    ("speedup-and-ffn-width", [*SPEEDUP, *LATENCY, "--ffn-width", "0.5"], "--speedup and --ffn-width are mutually"),
    ("speedup-without-latency", SPEEDUP, "measure one with `ghostify latency MODEL -o DIR`"),
    ("latency-without-speedup", [*PRUNE, "--width", "0.5", *LATENCY],
     "is read only with --speedup"),
    ("latency-alone", [*PRUNE, *LATENCY], "is read only with --speedup"),
    ("speedup-allocation-global", [*SPEEDUP, *LATENCY, "--allocation", "global"], "--allocation global is for --width"),
    ("speedup-allocation-unknown", [*SPEEDUP, *LATENCY, "--allocation", "best"], "unknown --allocation 'best'"),
    # no speed-up
    ("speedup-one", [*PRUNE, "--speedup", "1", *LATENCY], "--speedup 1.0 must be a finite number above 1"),
    ("speedup-below-one", [*PRUNE, "--speedup", "0.5", *LATENCY], "must be a finite number above 1"),
    ("speedup-nan", [*PRUNE, "--speedup", "nan", *LATENCY], "--speedup nan must be"),
    ("speedup-inf", [*PRUNE, "--speedup", "inf", *LATENCY], "--speedup inf must be"),
    ("speedup-not-a-number", [*PRUNE, "--speedup", "fast", *LATENCY], "Invalid value for '--speedup'"),
    # the latency model: missing, broken, of another model
    ("latency-missing", [*SPEEDUP, "--latency", "<good>/../nope.json"], "does not exist; write one with `ghostify"),
    ("latency-dir-without-file", [*SPEEDUP, "--latency", "<empty>"], "latency.json does not exist"),
    ("latency-corrupt", [*SPEEDUP, "--latency", "<corrupt>"], "is not readable JSON"),
    ("latency-newer", [*SPEEDUP, "--latency", "<newer>/latency.json"], "has format 99, which this ghostify"),
    ("latency-incomplete", [*SPEEDUP, "--latency", "<incomplete>"], "is incomplete or malformed"),
    ("latency-predicts-nothing", [*SPEEDUP, "--latency", "<free>"], "predict no positive latency"),
    ("latency-other-ffn", [*SPEEDUP, "--latency", "<other-ffn>"],
     "was measured for BERT, 2 layers, hidden 32, 4 heads, FFN 64, but this model is BERT, 2 layers, hidden 32, "
     "4 heads, FFN 37"),
    ("latency-other-family", [*SPEEDUP, "--latency", "<other-family>"], "was measured for RoBERTa, 2 layers"),
    ("latency-other-depth", [*SPEEDUP, "--latency", "<other-depth>"], "was measured for BERT, 3 layers"),
    ("latency-costs-sum-to-infinity", [*SPEEDUP, "--latency", "<huge>"],
     "whose sum for the dense model is inf ms, not a finite number"),
    ("latency-negative-cost", [*SPEEDUP, "--latency", "<negative>"], "each must be a finite number of milliseconds, 0 or more"),
    ("latency-row-without-predicted", [*SPEEDUP, "--latency", "<row-without-predicted>"],
     "has a malformed validation[0]: predicted_ms = None, not a finite number"),
    ("latency-row-measured-zero", [*SPEEDUP, "--latency", "<row-measured-zero>"], "measured_ms = 0: a forward pass"),
    ("latency-row-widths", [*SPEEDUP, "--latency", "<row-widths>"], "probes[0]: heads = [4, 4] and neurons = [37]"),
    # out of reach: even 1 head and 1 neuron per layer give 2.91x
    ("speedup-out-of-reach", [*PRUNE, "--speedup", "3", *LATENCY],
     "out of reach: even 1 head and 1 FFN neuron per layer predict 1.54 ms, a speed-up of at most 2.91x"),
    ("speedup-out-of-reach-pruned", ["prune", "{pruned}", "-o", "{out}", "--speedup", "3", *LATENCY], "at most 2.91x"),
    # the latency model is an input
    ("out-inside-latency", ["prune", "{scored}", "-o", "<good>/pruned", "--speedup", "2", *LATENCY],
     "inside the input --latency"),
    ("out-is-latency", ["prune", "{scored}", "-o", "<good>", "--speedup", "2", *LATENCY, "--overwrite"],
     "is the input --latency"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_prune_speedup_refuses_in_one_line(name, args, expected, world, latencies, tmp_path, capsys):
    out = tmp_path / "out"
    args = _fill([a.replace("<", f"{latencies}/").replace(">", "") for a in args], world, out)
    _check_refused(capsys, world, out, args, expected, inputs=(latencies,))


def test_a_recipe_stage_takes_the_same_settings(world, latencies, tmp_path, capsys):
    from .conftest import run_cli

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {world / 'scored'}\nstages:\n  - prune: {{speedup: 2, latency: {latencies / 'good'}}}\n")
    code, out, err = run_cli(capsys, "run", recipe, "-o", tmp_path / "runs", "--dry-run")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("01-prune"))
    assert "speedup=2.0" in row and f"latency={latencies / 'good'}" in row
    recipe.write_text(f"model: {world / 'scored'}\nstages:\n  - prune: {{speedup: 2, latncy: x}}\n")
    code, _, err = run_cli(capsys, "run", recipe, "-o", tmp_path / "runs", "--dry-run")
    assert code != 0 and "latency" in err  # the key is known: a misspelling is pointed at it


# ----------------------------------------------------------------------------------------------
# compress (issue 36, items 11-13): a latency model that predicts no speed-up, a damaged allocation.json,
# and two runs on one output at once
# ----------------------------------------------------------------------------------------------
COMPRESS = ["compress", "{m}", "-o", "{out}", "--dataset", "{toy}", "--text-columns", "sentence", "--label-column",
            "label", "--max-length", "32", "--max-samples", "32", "--importance-samples", "16", "--rounds", "3",
            "--runtime", "pytorch"]


def _costs(monkeypatch, tmp_path: Path, **costs: float) -> None:
    """``ghostify latency`` fits these costs instead of timing (a tiny model's are near the timer's noise)."""
    latency_step = importlib.import_module("ghostify.steps.latency")  # the module, not the step it exports

    def fixed(config, geometry, deployment, machine, **kwargs):
        return LatencyModel(geometry, deployment, machine, **costs)

    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(latency_step, "measure", fixed)


def _check_one_error(capsys, world: Path, out: Path, args: list[str], expected: str, *, code: int = 2,  # noqa: F811
                     kept: tuple[Path, ...] = ()) -> str:
    """``_check_refused`` for a command that may have written ``out`` before it refused (compress's latency stage):
    one `error:` line, no traceback, the inputs and the ``kept`` trees byte-identical, nothing beside ``out``."""
    roots = (world, *kept)
    before, beside = [_snapshot(r) for r in roots], _beside(out) | {out.name}
    exit_code, stdout, stderr = run_cli(capsys, *args)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert exit_code == code, stderr
    assert len(errors) == 1 and expected in errors[0], stderr
    assert "Traceback" not in stdout + stderr and "unexpected" not in stderr
    assert [_snapshot(r) for r in roots] == before, "an input changed"
    assert _beside(out) <= beside, f"left beside the output: {_beside(out) - beside}"
    return errors[0]


@pytest.mark.parametrize(("flag", "drop_layers"), [("--no-drop-layers", False), ("--drop-layers", True), (None, True)],
                         ids=["heads-and-neurons", "drop-layers-too", "default-budget-trains-so-layers-too"])
def test_compress_never_advises_a_speedup_it_refuses(flag, drop_layers, world, tmp_path, capsys, monkeypatch):  # noqa: F811
    """Item 11: with free heads and neurons, "ask for 1 or less"; now what predicts no speed-up, and what to do.
    Where the budget trains (quick, the default), whole layers are an axis unless --no-drop-layers."""
    _costs(monkeypatch, tmp_path, base_ms=1.0, layer_ms=0.1, head_ms=0.0, neuron_ms=0.0)
    out = tmp_path / "runs" / "out"  # the cache is beside runs/
    args = _fill([*COMPRESS, "--speedup", "1.5", *([flag] if flag else [])], world, out)
    error = _check_one_error(capsys, world, out, args, "the latency model predicts no speed-up from pruning heads and "
                             "FFN neurons (at most 1.00x" if not drop_layers else "predicts no speed-up")
    assert "ask for" not in error and "--refresh" in error
    assert ("--drop-layers" in error) != drop_layers  # advised only where it was not asked for
    assert not out.exists()  # refused from the latency model alone, before any stage ran: nothing in OUT


def _fake_stages(monkeypatch) -> list[float]:
    """compress with its stages and timings replaced (the allocation.json reader is what is tested): returns the
    speed-ups each allocation was asked for."""
    from ghostify.recipe import compress as compress_module

    allocations: list[float] = []

    def allocate(recipe, run_dir, deployment, rounds, say, dense_exports=None, allocated=None, k=1):
        speedup = next(s for s in recipe.stages if s.name == "prune").settings["speedup"]
        allocations.append(speedup)
        return {"allocated_for": speedup, "predicted": 2.0, "measured": 1.98, "rounds": rounds}

    monkeypatch.setattr(compress_module, "_check_reachable", lambda *a: None)
    monkeypatch.setattr(compress_module, "_choose", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_structure", lambda *a: (None, None))
    monkeypatch.setattr(compress_module, "_allocate_and_measure", allocate)
    monkeypatch.setattr(compress_module, "run_recipe", lambda *a, **k: None)
    monkeypatch.setattr(compress_module, "_measure", lambda *a, **k: {"measured": 1.98})
    monkeypatch.setattr(compress_module, "_report", lambda *a, **k: {"measured_speedup": 1.98, "target_speedup": 2,
                                                                     "model_dir": "final"})
    monkeypatch.setattr(compress_module, "_write_report", lambda out, report: None)
    return allocations


#: (id, how allocation.json is damaged, what the one warning says). Item 12: `attempts: [{}]` was an unexpected
#: KeyError: 'measured'; every damage is now ignored with one warning and the allocation made again
ALLOCATIONS: list[tuple[str, Any, str]] = [
    ("attempts-of-empty-mappings", lambda a: a.__setitem__("attempts", [{}]), "attempts[0].allocated_for = None"),
    ("choice-not-a-mapping", lambda a: a.__setitem__("choice", "uniform"), "choice = 'uniform', neither null nor"),
    ("prune-of-a-bad-width", lambda a: a.__setitem__("prune", {"width": "7/0"}), "prune.width = '7/0', not a width"),
    ("prune-not-a-mapping", lambda a: a.__setitem__("prune", [2]), "prune = [2], neither null nor"),
    ("attempts-empty", lambda a: a.__setitem__("attempts", []), "attempts = [], not a list of measured allocations"),
    ("attempts-not-a-list", lambda a: a.__setitem__("attempts", "twice"), "attempts = 'twice'"),
    ("measured-not-a-number", lambda a: a["attempts"][0].__setitem__("measured", float("nan")),
     "attempts[0].measured = nan, not a positive number"),
    ("measured-a-string", lambda a: a["attempts"][0].__setitem__("measured", "1.98"), "attempts[0].measured = '1.98'"),
    ("kept-not-a-flag", lambda a: a["attempts"][0].__setitem__("kept", "yes"), "attempts[0].kept = 'yes', not true"),
    ("two-kept", lambda a: a["attempts"].extend([a["attempts"][0]] * 2), "more than one of the attempts is marked kept"),
    ("structure-not-a-pair", lambda a: a["attempts"][0].__setitem__("structure", [None]),
     "attempts[0].structure = [None], not [layers kept, hidden width]"),
    ("allocated-for-one", lambda a: a.__setitem__("allocated_for", 1), "allocated_for = 1, not a speed-up above 1"),
    ("keep-layers-negative", lambda a: a.__setitem__("keep_layers", [-1]), "keep_layers = [-1], neither null nor"),
    ("not-an-object", lambda a: (a.clear(), a.__setitem__("x", 1)), "not a JSON object with the settings of a run"),
    ("not-json", None, "not readable JSON"),
]


@pytest.mark.parametrize(("name", "damage", "warning"), ALLOCATIONS, ids=[a[0] for a in ALLOCATIONS])
def test_a_damaged_allocation_is_made_again_with_one_warning(name, damage, warning, world, tmp_path, capsys,  # noqa: F811
                                                             monkeypatch):
    allocations = _fake_stages(monkeypatch)
    out = tmp_path / "out"
    args = _fill([*COMPRESS, "--speedup", "2"], world, out)
    code, _, err = run_cli(capsys, *args)
    assert code == 0 and allocations == [2.0], err
    saved = json.loads((out / "allocation.json").read_text())
    code, _, err = run_cli(capsys, *args)  # a good file: kept, no warning
    assert code == 0 and allocations == [2.0] and "the allocation of the earlier run" in err and "warning" not in err
    if damage is None:
        (out / "allocation.json").write_text('{"settings": ')
    else:
        damage(saved)
        (out / "allocation.json").write_text(json.dumps(saved))
    before = _snapshot(world)
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "Traceback" not in stdout + err and not [line for line in err.splitlines() if line.startswith("error:")]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"ignoring {out / 'allocation.json'}: " in warnings[0] and warning in warnings[0], err
    assert "the allocation is made again" in warnings[0]
    assert allocations == [2.0, 2.0]  # allocated again
    assert json.loads((out / "allocation.json").read_text())["attempts"][0]["measured"] == 1.98  # and saved again
    assert _snapshot(world) == before


#: `python -m ghostify ARGS`, but with a latency model of fixed costs (1.5x within reach: compress goes on to OUT)
#: and pausing once compress runs its first stage, holding OUT's lock
PAUSED_STAGES = """\
import importlib, runpy, sys, time
from ghostify.latency_model import LatencyModel
latency = importlib.import_module("ghostify.steps.latency")
latency.measure = lambda config, geometry, deployment, machine, **kwargs: LatencyModel(
    geometry, deployment, machine, base_ms=1.0, layer_ms=0.1, head_ms=0.5, neuron_ms=0.01)
compress = importlib.import_module("ghostify.recipe.compress")
def paused(*args, **kwargs):
    print("RUNNING", flush=True)
    time.sleep(120)
compress.run_recipe = paused
sys.argv = ["ghostify", *sys.argv[1:]]
runpy.run_module("ghostify", run_name="__main__")
"""


def _paused(script: str, args: list[str], cache: Path) -> subprocess.Popen:
    """A ghostify run in another process, paused mid-way by ``script`` (it prints one line when it pauses)."""
    env = dict(_env(), GHOSTIFY_CACHE=str(cache))
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_a_second_compress_on_one_output_is_refused_while_the_first_runs(world, tmp_path, capsys, monkeypatch):  # noqa: F811
    """Item 13: two compress runs into one -o at once interleaved (one died of an unexpected FileNotFoundError)."""
    from ghostify.files import output_lock

    out = tmp_path / "out"
    args = _fill([*COMPRESS, "--speedup", "1.5"], world, out)
    first = _paused(PAUSED_STAGES, args[:], tmp_path / "cache")
    try:
        assert first.stdout.readline().strip() == "RUNNING", first.stderr.read()
        _costs(monkeypatch, tmp_path, base_ms=1.0, layer_ms=0.1, head_ms=0.5, neuron_ms=0.01)  # as the first run's
        error = _check_one_error(capsys, world, out, args, f"{out} is in use by another ghostify run "
                                 f"(process {first.pid}); wait for it to finish, or choose another -o", kept=(out,))
        assert error.startswith("error: ")
    finally:
        first.kill()  # SIGKILL: the OS releases its lock
        first.communicate(timeout=60)
    with output_lock(out):  # a killed run leaves no stale lock: its re-run goes on
        pass


def test_a_second_run_of_a_recipe_on_one_output_is_refused_and_a_killed_run_resumes(world, tmp_path, capsys):  # noqa: F811
    """Item 13: two `ghostify run` into one -o at once (one removed the other's temporary stage as a leftover)."""
    from .test_bad_input import PAUSED_WRITE

    out = tmp_path / "run"
    args = ["run", str(world / "r.yaml"), "-o", str(out)]
    first = _paused(PAUSED_WRITE, args, tmp_path / "cache")
    try:
        assert first.stdout.readline().strip() == "WRITING", first.stderr.read()
        assert any(p.name.startswith(".01-prune.tmp-") for p in out.iterdir())  # mid-write indeed
        _check_one_error(capsys, world, out, args, f"{out} is in use by another ghostify run (process {first.pid})",
                         kept=(out,))
    finally:
        first.kill()
        first.communicate(timeout=60)
    code, _, err = run_cli(capsys, *args)  # killed with -9: nothing holds the lock, and the run completes
    assert code == 0, err
    assert (out / "02-attach-ghost" / "config.json").is_file()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary stage, and no lock file
