"""``ghostify latency`` (issue 26): the fit of the per-layer costs, the cache per geometry,
deployment and machine, the whole command on a tiny BERT (PyTorch and ONNX Runtime int8), the
recipe stage, and its refusals (one line each, inputs untouched)."""

from __future__ import annotations

import hashlib
import importlib
import json
import warnings
from pathlib import Path

import pytest

from ghostify import steps
from ghostify.errors import GhostifyError
from ghostify.latency_model import LATENCY_FILE, ChannelCosts, Deployment, Geometry, LatencyModel
from ghostify.steps.latency import (cache_file, fit_costs, machine_key, original_geometry, probe_shapes,
                                    validation_shapes)
from ghostify.testing import tiny_checkpoint

from .conftest import run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

module = importlib.import_module("ghostify.steps.latency")  # the package's ``latency`` is the step function
GEOMETRY = Geometry(family="BERT", hidden_size=384, num_heads=12, ffn_size=1536, num_layers=6)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Every test its own cache directory: nothing is written to the home directory."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("GHOSTIFY_CACHE", str(directory))
    return directory


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("latency") / "bert")


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


# ---- the fit --------------------------------------------------------------------------------------

def _timed(rows, base, layer, head, neuron, per_channel=(0.0, 0.0, 0.0, 0.0)):
    """Each row's time by hand: every cost less what the residual channels it removed save of it."""
    out = []
    for r in rows:
        removed = GEOMETRY.hidden_size - (r.get("hidden") or GEOMETRY.hidden_size)
        b, l, h, n = (c - s * removed for c, s in zip((base, layer, head, neuron), per_channel))
        out.append({**r, "measured_ms": b + l * len(r["heads"]) + h * sum(r["heads"]) + n * sum(r["neurons"])})
    return out


def test_the_fit_recovers_hand_made_costs_from_the_probes():
    rows = _timed([s.row() for s in probe_shapes(GEOMETRY)], 1.5, 0.25, 0.125, 0.001)
    costs, per_channel = fit_costs(rows, GEOMETRY.hidden_size)
    assert costs == pytest.approx((1.5, 0.25, 0.125, 0.001), rel=1e-9, abs=1e-12)
    assert per_channel == (0.0, 0.0, 0.0, 0.0)  # measured at the full hidden size only: nothing said of the rest
    # and then predicts the whole models it did not see
    model = LatencyModel(GEOMETRY, Deployment(), "here", *costs)
    for shape in validation_shapes(GEOMETRY, per_layer=True):
        want = _timed([shape.row()], 1.5, 0.25, 0.125, 0.001)[0]["measured_ms"]
        assert model.predict(shape.heads, shape.neurons) == pytest.approx(want, rel=1e-9)
    with pytest.raises(GhostifyError, match="measured at the full hidden size .384. only and cannot predict 192"):
        model.predict([12] * 6, [1536] * 6, hidden=192)


def test_the_fit_recovers_what_a_residual_channel_saves_from_probes_at_narrower_widths():
    slopes = (0.001, 0.0004, 0.0002, 0.000001)  # the head's attention scores do not shrink: 0.125 - 0.0002 x 384 > 0
    narrower = [192, 96]
    rows = _timed([s.row() for s in probe_shapes(GEOMETRY, narrower)], 1.5, 0.25, 0.125, 0.001, slopes)
    costs, per_channel = fit_costs(rows, GEOMETRY.hidden_size)
    assert costs == pytest.approx((1.5, 0.25, 0.125, 0.001), rel=1e-7)
    assert per_channel == pytest.approx(slopes, rel=1e-6)
    model = LatencyModel(GEOMETRY, Deployment(), "here", *costs, per_channel=ChannelCosts(*per_channel))
    for shape in validation_shapes(GEOMETRY, per_layer=True, narrower=narrower):  # whole models at any width
        want = _timed([shape.row()], 1.5, 0.25, 0.125, 0.001, slopes)[0]["measured_ms"]
        assert model.predict(shape.heads, shape.neurons, shape.hidden) == pytest.approx(want, rel=1e-6)
    # hand-computed: 6 layers of 6 heads and 768 neurons at 192 channels
    b, l, h, n = (c - s * 192 for c, s in zip((1.5, 0.25, 0.125, 0.001), slopes))
    assert model.predict([6] * 6, [768] * 6, hidden=192) == pytest.approx(b + 6 * (l + 6 * h + 768 * n))
    again = LatencyModel.from_dict(json.loads(json.dumps(model.to_dict())))  # saved and read: the same model
    assert again == model and again.predicts_hidden


def test_the_fastest_prediction_hand_computed():
    # base 2, per layer run 1 + 0.5 per head + 0.01 per neuron
    costs = LatencyModel(GEOMETRY, Deployment(), "here", base_ms=2.0, layer_ms=1.0, head_ms=0.5, neuron_ms=0.01)
    heads, neurons = [12] * 6, [1536] * 6
    one_layer = 1.0 + 0.5 + 0.01  # a layer of 1 head and 1 neuron
    assert costs.fastest_ms(heads, neurons) == pytest.approx(2.0 + 6 * one_layer)
    assert costs.fastest_ms(heads, neurons, droppable=range(6)) == pytest.approx(2.0 + one_layer)  # one layer stays
    assert costs.fastest_ms(heads, neurons, droppable=[0, 1]) == pytest.approx(2.0 + 4 * one_layer)
    # a layer run three times (shared) costs three runs
    assert costs.fastest_ms([12, 12], [1536, 1536], applications=[3, 1]) == pytest.approx(2.0 + 4 * one_layer)
    # a unit that saves nothing is not removed: free heads stay at 12
    free_heads = LatencyModel(GEOMETRY, Deployment(), "here", base_ms=2.0, layer_ms=1.0, head_ms=0.0, neuron_ms=0.01)
    assert free_heads.fastest_ms([12], [1536]) == pytest.approx(2.0 + 1.0 + 0.01)


def test_the_probes_identify_every_cost_even_with_one_head():
    for geometry in (GEOMETRY, Geometry("tiny", 32, 1, 37, 2)):
        probes = probe_shapes(geometry)
        assert len({(s.heads, s.neurons) for s in probes}) == len(probes)  # none timed twice
        rows = _timed([s.row() for s in probes], 2.0, 0.5, 0.25, 0.01)
        (base, layer, head, neuron), _ = fit_costs(rows, geometry.hidden_size)
        if geometry.num_heads > 1:
            assert (base, layer, head, neuron) == pytest.approx((2.0, 0.5, 0.25, 0.01), rel=1e-9)
        else:  # every layer keeps its one head: only the sum of the two costs is determined, and predicted
            assert (base, layer + head, neuron) == pytest.approx((2.0, 0.75, 0.01), rel=1e-9)


def test_a_cost_the_noise_makes_negative_is_zero_and_the_rest_refitted():
    rows = _timed([s.row() for s in probe_shapes(GEOMETRY)], 1.0, 0.3, 0.0, 0.002)
    for i, row in enumerate(rows):  # heads cost nothing; the noise makes more heads look faster
        row["measured_ms"] -= 0.001 * sum(row["heads"]) * (1 + 0.1 * (i % 2))
    costs, _ = fit_costs(rows, GEOMETRY.hidden_size)
    assert min(costs) >= 0 and costs[2] == 0
    assert costs[1] > 0 and costs[3] > 0


# ---- the cache ------------------------------------------------------------------------------------

@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """The timing replaced by constant times, counting its calls (each is one measurement)."""
    calls = []

    def take_turns(runs, *, rounds, warmup):
        calls.append(len(runs))
        return [[1.0 + i] * rounds for i in range(len(runs))], [[1.0] * rounds for _ in runs]

    monkeypatch.setattr(module, "take_turns", take_turns)
    return calls


def test_a_second_call_reads_the_cache_and_refresh_measures_again(bert, counted, cache):
    first = steps.latency(bert, runtime="pytorch", rounds=2, warmup=0)
    assert len(counted) == 1
    lines = []
    again = steps.latency(bert, runtime="pytorch", rounds=2, warmup=0, progress=lines.append)
    assert len(counted) == 1 and again == first
    assert any("measured before" in line for line in lines)
    steps.latency(bert, runtime="pytorch", rounds=2, warmup=0, refresh=True)
    assert len(counted) == 2
    # another deployment is another key; each is cached on its own
    steps.latency(bert, runtime="pytorch", threads=2, rounds=2, warmup=0)
    steps.latency(bert, runtime="pytorch", batch_size=2, rounds=2, warmup=0)
    assert len(counted) == 4
    steps.latency(bert, runtime="pytorch", threads=2, rounds=2, warmup=0)
    assert len(counted) == 4
    assert len(list((cache / "latency").iterdir())) == 3


def test_a_second_process_waits_for_the_measurement_under_way_and_reads_its_result(bert, counted, cache):
    """Two runs measuring one machine at once would time each other's load: the second waits for the
    first's lock and then reads what it cached, measuring nothing."""
    import fcntl
    import os
    import threading
    import time

    from ghostify.checkpoint import load_config

    first = steps.latency(bert, runtime="pytorch", rounds=2, warmup=0)
    path = cache_file(original_geometry(load_config(bert)), Deployment(runtime="pytorch"), machine_key("pytorch"))
    stored = path.read_bytes()
    path.unlink()  # as if the first run were still measuring
    lock = module.lock_file(path)
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: a lock held against this process too
    lines, results = [], []
    waiting = threading.Thread(target=lambda: results.append(
        steps.latency(bert, runtime="pytorch", rounds=2, warmup=0, progress=lines.append)))
    waiting.start()
    deadline = time.monotonic() + 30
    while not any("waiting for its result" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiting.is_alive() and any(str(lock) in line for line in lines)
    path.write_bytes(stored)  # the first run finishes: its result is cached, then its lock released
    os.close(fd)
    waiting.join(30)
    assert results == [first] and len(counted) == 1  # read, not measured again


def test_a_corrupt_cache_file_is_ignored_with_a_warning_and_replaced(bert, counted):
    from ghostify.checkpoint import load_config

    path = cache_file(original_geometry(load_config(bert)), Deployment(runtime="pytorch"), machine_key("pytorch"))
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 1, "base_ms": ')
    with pytest.warns(UserWarning, match="ignoring the cached latency model"):
        steps.latency(bert, runtime="pytorch", rounds=2, warmup=0)
    assert len(counted) == 1
    assert LatencyModel.load(path).dense_ms() > 0  # measured and written again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steps.latency(bert, runtime="pytorch", rounds=2, warmup=0)
    assert len(counted) == 1


def test_the_key_is_the_geometry_deployment_and_machine(cache):
    a = cache_file(GEOMETRY, Deployment(), "cpu")
    assert a.parent == cache / "latency"
    assert a == cache_file(GEOMETRY, Deployment(), "cpu")
    others = [cache_file(GEOMETRY, Deployment(threads=2), "cpu"), cache_file(GEOMETRY, Deployment(seq_len=64), "cpu"),
              cache_file(GEOMETRY, Deployment(runtime="onnx"), "cpu"), cache_file(GEOMETRY, Deployment(), "other cpu"),
              cache_file(Geometry("BERT", 384, 12, 1536, 4), Deployment(), "cpu")]
    assert len({a, *others}) == 6


def test_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("GHOSTIFY_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert module.cache_dir() == tmp_path / "xdg" / "ghostify"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert module.cache_dir() == tmp_path / "home" / ".cache" / "ghostify"


# ---- the geometry ---------------------------------------------------------------------------------

def test_a_pruned_model_describes_the_model_it_was_pruned_from(bert, tmp_path):
    from ghostify.checkpoint import load_config

    with pytest.warns(UserWarning):  # no importance scores: by weight magnitude, evenly spaced layers
        steps.prune(bert, tmp_path / "pruned", width="1/4")
        steps.drop_layers(tmp_path / "pruned", tmp_path / "dropped", keep=1)
    dense = original_geometry(load_config(bert))
    assert dense == Geometry("BERT", 32, 4, 37, 2)
    assert original_geometry(load_config(tmp_path / "pruned")) == dense
    assert original_geometry(load_config(tmp_path / "dropped")) == dense


def test_the_whole_models_of_a_model_with_dropped_layers_have_the_original_depth(tmp_path):
    """drop-layers leaves ModernBERT's ``layer_types`` one entry per kept layer: the full-depth models
    get the family's own pattern back."""
    from ghostify.checkpoint import load_config

    tiny_checkpoint(tmp_path / "modernbert", "modernbert")
    with pytest.warns(UserWarning):  # no importance scores: evenly spaced layers
        steps.drop_layers(tmp_path / "modernbert", tmp_path / "dropped", keep=2)
    config = load_config(tmp_path / "dropped")
    geometry = original_geometry(config)
    assert geometry.num_layers == 3 and len(config.layer_types) == 2
    for shape in validation_shapes(geometry, per_layer=True):
        net, record = module.build(module.probe_config(config), shape, 0)
        assert len(net.model.layers) == 3 and record.heads_per_layer == list(shape.heads)
        assert net.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]


def test_albert_shares_its_layers_so_no_model_has_a_width_per_layer(tmp_path, counted):
    albert = tiny_checkpoint(tmp_path / "albert", "albert")
    result = steps.latency(albert, runtime="pytorch", rounds=1, warmup=0)
    assert [row["name"] for row in result.validation] == ["dense", "half width", "hidden 16", "half width, hidden 16"]
    assert result.geometry.num_layers == 3


# ---- end to end -----------------------------------------------------------------------------------

def test_pytorch_end_to_end_writes_a_loadable_latency_model(bert, tmp_path, capsys):
    before = _tree(bert)
    code, out, err = run_cli(capsys, "latency", str(bert), "-o", str(tmp_path / "lat"), "--runtime", "pytorch",
                             "--rounds", "3", "--warmup", "1")
    assert code == 0, err
    assert "largest error" in out and "non-uniform" in out and "probe" in out
    assert sorted(p.name for p in (tmp_path / "lat").iterdir()) == [LATENCY_FILE]
    result = LatencyModel.load(tmp_path / "lat")
    assert result.dense_ms() > 0 and result.deployment == Deployment(runtime="pytorch")
    # the tiny BERT's hidden size 32 is also measured at 16 and 8 channels (multiples of its 4 heads)
    assert [row["name"] for row in result.validation] == ["dense", "half width", "non-uniform", "hidden 16",
                                                          "half width, hidden 16"]
    assert len(result.probes) == 16 and all(row["measured_ms"] > 0 for row in result.probes + result.validation)
    assert result.predicts_hidden and {row["hidden"] for row in result.probes} == {None, 16, 8}
    assert result.max_error() is not None
    assert _tree(bert) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "lat"]


@pytest.mark.slow  # every day: the OpenVINO int8 probes (test_openvino.py) and ONNX Runtime's int8 export
def test_onnx_int8_end_to_end(bert, tmp_path, monkeypatch):
    """Fewer probes than a real run (each is an ONNX export): enough to identify the four costs."""
    monkeypatch.setattr(module, "probe_shapes", lambda g, narrower=(): [s for s in probe_shapes(g, narrower) if s.name in (
        "1 layer(s), 4 heads, 37 neurons", "1 layer(s), 1 heads, 37 neurons", "1 layer(s), 4 heads, 4 neurons",
        "2 layer(s), 4 heads, 37 neurons", "1 layer(s), 4 heads, 37 neurons, hidden 16")])
    monkeypatch.setattr(module, "validation_shapes",
                        lambda g, per_layer, narrower=(): validation_shapes(g, per_layer=per_layer)[:1])
    before = _tree(bert)
    result = steps.latency(bert, tmp_path / "lat", runtime="onnx-int8", rounds=3, warmup=1)
    assert len(result.probes) == 5  # a probe of a narrower hidden size exports and runs in int8 too
    loaded = LatencyModel.load(tmp_path / "lat" / LATENCY_FILE)
    assert loaded == result and loaded.dense_ms() > 0
    assert [row["name"] for row in loaded.validation] == ["dense"]
    assert "onnxruntime" in loaded.machine
    assert _tree(bert) == before


def test_a_recipe_stage_writes_latency_json_that_a_later_stage_names(bert, tmp_path, counted):
    from ghostify import recipe

    (tmp_path / "r.yaml").write_text(f"model: {bert}\nstages:\n  - latency:\n      runtime: pytorch\n"
                                     "      rounds: 1\n      warmup: 0\n")
    recipe.run(recipe.load(tmp_path / "r.yaml"), tmp_path / "run")
    assert LatencyModel.load(tmp_path / "run" / "01-latency").dense_ms() > 0
    (tmp_path / "p.yaml").write_text(f"model: {bert}\nstages:\n  - latency: {{runtime: pytorch}}\n"
                                     "  - prune:\n      speedup: 1.5\n      latency: ${latency}\n")
    stages = recipe.plan(recipe.load(tmp_path / "p.yaml"), tmp_path / "run2")
    assert stages[1].arguments["latency"] == str(tmp_path / "run2" / "01-latency")
    assert stages[1].arguments["model"] == str(bert)  # the latency stage produces no model


def test_the_step_refuses_bad_counts_before_reading_anything(tmp_path):
    for kwargs, expected in (({"rounds": 0}, "--rounds 0"), ({"warmup": -1}, "--warmup -1"),
                             ({"threads": 0}, "--threads 0"), ({"runtime": "tflite"}, "unknown --runtime")):
        with pytest.raises(GhostifyError, match=expected):
            steps.latency(tmp_path / "missing", **kwargs)


# ---- refusals (tests/test_bad_input.py's harness) ---------------------------------------------------

@pytest.fixture(scope="module")
def extra(tmp_path_factory) -> Path:
    """Inputs of this file's cases: a checkpoint of a family ghostify cannot prune."""
    root = tmp_path_factory.mktemp("bad-latency")
    (root / "gpt2").mkdir()
    config = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2}
    (root / "gpt2" / "config.json").write_text(json.dumps(config))
    return root


CASES = [
    ("unknown-runtime", ["latency", "{m}", "--runtime", "tflite"], "unknown --runtime 'tflite'"),
    ("batch-zero", ["latency", "{m}", "--batch-size", "0"], "--batch-size 0 must be"),
    ("threads-zero", ["latency", "{m}", "--threads", "0"], "--threads 0 must be"),
    ("rounds-zero", ["latency", "{m}", "--rounds", "0"], "--rounds 0 must be"),
    ("seq-len-beyond-positions", ["latency", "{m}", "--seq-len", "100000"], "--seq-len 100000 exceeds"),
    ("missing-model", ["latency", "{world}/nope/m", "-o", "{out}"], "does not exist"),
    ("output-is-the-model", ["latency", "{m}", "-o", "{m}"], "inputs are never modified"),
    ("output-exists", ["latency", "{m}", "-o", "{pruned}"], "already exists"),
    ("family-not-prunable", ["latency", "EXTRA/gpt2", "--runtime", "pytorch"], "unsupported architecture 'gpt2'"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(name, args, expected, world, extra, tmp_path, capsys,  # noqa: F811
                                                   cache):
    out = tmp_path / "out"
    args = [a.replace("EXTRA", str(extra)) for a in _fill(args, world, out)]
    _check_refused(capsys, world, out, args, expected, inputs=(extra,))
    assert not cache.exists()  # refused before anything was measured
