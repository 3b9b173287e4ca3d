"""`ghostify prune --speedup X --latency FILE` refused in one line, before any weight is read:
the settings that exclude each other, a speed-up that is no speed-up, a latency model that is
missing, broken or of another shape, and a target out of the latency model's reach."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS

from .test_bad_input import _check_refused, _fill, world  # noqa: F401

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
