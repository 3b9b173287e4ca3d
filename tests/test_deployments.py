"""Issue 47, phase 2: the dense model in every installed deployment (``bench --all-runtimes``), the fastest named
and cached; ``--runtime auto`` picks it; compress's report states the speed-up over it too."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment, LatencyModel
from ghostify.recipe import compress_report, compress_timing
from ghostify.recipe.compress_settings import CompressSettings
from ghostify.runtimes import installed_deployments, target
from ghostify.settings import DataSettings
from ghostify.steps import deployments
from ghostify.testing import tiny_checkpoint

from .conftest import run_cli

latency = importlib.import_module("ghostify.steps.latency")  # the module, not the function it exports

#: CPU milliseconds a fake timing gives each deployment's dense model (OpenVINO int8 the fastest, as on a CPU
#: with AVX-512 VNNI)
FAKE_MS = {"onnx-int8": 9.0, "onnx": 17.9, "openvino": 14.5, "openvino-int8": 7.0, "pytorch": 30.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("deployments") / "model"
    tiny_checkpoint(path)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _bench_row(ms: float, *, threads: int = 1, wall: float | None = None) -> dict[str, Any]:
    """A row as ``bench`` returns it: ``ms`` of CPU time, ``wall`` (default: ``ms`` + 1) of wall-clock time."""
    wall = ms + 1 if wall is None else wall
    return {"median_ms": wall, "p25_ms": wall - 0.5, "p75_ms": wall + 0.5, "cpu_median_ms": ms, "threads": threads}


@pytest.fixture
def fake_timing(monkeypatch) -> list[list[str]]:
    """Every deployment installed, no export, and ``bench`` giving each model :data:`FAKE_MS` of its deployment
    (the path names it); the calls of ``bench`` are recorded."""
    calls: list[list[str]] = []

    def graphs(model, directory, names, **kwargs):
        return {name: f"{directory}/{name}" for name in names}

    def bench(models, **kwargs):
        calls.append([str(m) for m in models])
        return [_bench_row(FAKE_MS[Path(str(m)).name], threads=kwargs["threads"]) for m in models]

    monkeypatch.setattr(deployments, "installed_deployments", lambda: tuple(FAKE_MS))
    monkeypatch.setattr(deployments, "dense_graphs", graphs)
    monkeypatch.setattr(deployments, "bench", bench)
    return calls


@pytest.mark.slow  # the full run (it exports to every runtime; the choice and cache daily, timings faked)
def test_bench_all_runtimes_times_every_installed_deployment_and_names_the_fastest(tiny, cache, capsys):
    code, out, err = run_cli(capsys, "bench", tiny, "--all-runtimes", "--rounds", "2", "--warmup", "0", "--seq-len",
                             "16")
    assert code == 0, err
    assert "timing the dense model in" in err
    # cached: the library call (what --runtime auto makes) reads what bench timed, without timing again
    said: list[str] = []
    rows = deployments.dense_deployments(tiny, rounds=2, warmup=0, seq_len=16, progress=said.append)
    assert any("timed before on this machine" in line for line in said)
    assert [r["deployment"] for r in rows] == list(installed_deployments())
    assert {"pytorch", "onnx", "onnx-int8", "openvino", "openvino-int8"} <= {r["deployment"] for r in rows}
    (best,) = [r for r in rows if r["fastest"]]
    assert best["ms"] == min(r["ms"] for r in rows)
    assert all(r["clock"] == "cpu" and r["ms"] == r["cpu_ms"] for r in rows)  # one thread: CPU time
    assert rows[0]["speedup"] == 1.0 and best["speedup"] == pytest.approx(rows[0]["ms"] / best["ms"])
    # the table marks it and the last line names it
    assert f"{best['deployment']} (fastest)" in out and f"fastest: {best['deployment']} ({best['title']})" in out
    for row in rows:
        assert f"{row['ms']:.2f}" in out


@pytest.mark.parametrize("extra, expected", [
    (("second",), "--all-runtimes times one checkpoint in every runtime, and 2 models were given"),
    (("--rounds", "0"), "--rounds 0 must be a whole number of at least 1"),
])
def test_bench_all_runtimes_refuses_in_one_line(tiny, cache, capsys, extra, expected):
    args = ["bench", tiny, "--all-runtimes", *extra]
    if extra[0] == "second":
        args = ["bench", tiny, tiny, "--all-runtimes"]
    code, out, err = run_cli(capsys, *args)
    assert code != 0 and expected in err.strip().splitlines()[-1] and "Traceback" not in err


def test_a_graph_is_refused_it_names_the_checkpoint_to_pass(tmp_path, cache):
    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"not a graph")
    with pytest.raises(GhostifyError, match="pass the checkpoint it was exported from"):
        deployments.dense_deployments(graph)


def test_rows_read_cpu_time_on_one_thread_and_wall_clock_time_on_more():
    names = ["onnx-int8", "openvino-int8", "pytorch"]
    one = deployments.deployment_rows(names, [_bench_row(9.0, wall=20.0), _bench_row(7.0, wall=30.0),
                                              _bench_row(30.0, wall=31.0)])
    assert [r["ms"] for r in one] == [9.0, 7.0, 30.0] and [r["fastest"] for r in one] == [False, True, False]
    assert one[1]["speedup"] == pytest.approx(9 / 7) and one[1]["title"] == "OpenVINO int8"
    two = deployments.deployment_rows(names, [_bench_row(9.0, threads=2, wall=20.0),
                                              _bench_row(7.0, threads=2, wall=30.0),
                                              _bench_row(30.0, threads=2, wall=31.0)])
    assert [r["ms"] for r in two] == [20.0, 30.0, 31.0] and deployments.fastest(two)["deployment"] == "onnx-int8"


def test_the_timing_is_cached_per_model_structure_shape_and_machine(tiny, cache, fake_timing, tmp_path):
    first = deployments.dense_deployments(tiny, rounds=2)
    assert len(fake_timing) == 1 and deployments.fastest(first)["deployment"] == "openvino-int8"
    assert deployments.dense_deployments(tiny, rounds=2) == first and len(fake_timing) == 1  # reused
    copy = tmp_path / "copy"  # the same structure elsewhere, other label names: the same entry
    tiny_checkpoint(copy)
    config = json.loads((copy / "config.json").read_text())
    config["id2label"] = {"0": "no", "1": "yes"}
    (copy / "config.json").write_text(json.dumps(config))
    deployments.dense_deployments(copy, rounds=2)
    assert len(fake_timing) == 1
    deployments.dense_deployments(tiny, rounds=2, seq_len=64)  # another shape
    deployments.dense_deployments(tiny, rounds=2, refresh=True)  # asked to time again
    assert len(fake_timing) == 3
    (entry,) = [p for p in (cache / "deployments").iterdir() if json.loads(p.read_text())["key"]["seq_len"] == 128]
    entry.write_text("{not json")
    with pytest.warns(UserWarning, match="ignoring the cached timing"):
        deployments.dense_deployments(tiny, rounds=2)
    assert len(fake_timing) == 4


def test_runtime_auto_picks_the_fastest_deployment_and_says_so(tiny, cache, fake_timing):
    said: list[str] = []
    chosen = deployments.chosen_deployment(tiny, Deployment(runtime="auto", threads=1), say=said.append)
    assert chosen == Deployment(runtime="openvino-int8", threads=1)
    (line,) = [s for s in said if s.startswith("--runtime auto")]
    assert "openvino-int8 (OpenVINO int8)" in line and "7.00 ms" in line and "onnx-int8 9.00" in line
    named = Deployment(runtime="onnx")
    assert deployments.chosen_deployment(tiny, named) is named and len(fake_timing) == 1  # a named one: no timing


def test_compress_runtime_auto_ships_in_the_fastest(tiny, cache, fake_timing, monkeypatch):
    monkeypatch.setattr(compress_timing, "chosen_deployment", deployments.chosen_deployment)  # conftest's: no timing
    assert CompressSettings(model=str(tiny), speedup=2).deployment.runtime == "auto"  # compress's default
    settings = CompressSettings(model=str(tiny), speedup=2, deployment=Deployment(runtime="auto"),
                                data=DataSettings(task="sst2"))
    said: list[str] = []
    chosen = compress_timing.chosen_runtime(settings, said.append)
    assert chosen.deployment.runtime == "openvino-int8" and chosen.speedup == 2
    assert any(line.startswith("--runtime auto: openvino-int8") for line in said)
    assert compress_timing.chosen_runtime(chosen, said.append) is chosen  # resolved: nothing timed again
    assert len(fake_timing) == 1


def test_latency_runtime_auto_measures_the_fastest_deployment(tiny, cache, fake_timing, monkeypatch):
    def fixed(config, geometry, deployment, machine, **kwargs):
        return LatencyModel(geometry, deployment, machine, base_ms=1.0, layer_ms=0.1, head_ms=0.5, neuron_ms=0.01)

    monkeypatch.setattr(latency, "measure", fixed)
    result = latency.latency(tiny, runtime="auto")
    assert result.deployment.runtime == "openvino-int8"
    assert "OpenVINO" in result.machine or "openvino" in result.machine


def test_auto_is_no_deployment_a_latency_model_describes():
    with pytest.raises(GhostifyError, match="unknown --runtime 'auto'"):
        Deployment(runtime="auto").check()
    Deployment(runtime="auto").check(auto=True)
    with pytest.raises(GhostifyError, match="unknown --runtime 'tpu'; choose one of onnx-int8, .*pytorch, auto$"):
        Deployment(runtime="tpu").check(auto=True)  # where auto is a choice, the refusal lists it


def test_compress_times_the_shipped_model_against_the_dense_model_in_every_deployment(tmp_path, monkeypatch):
    """The shipped graph, the dense model in its runtime and in every other installed deployment take turns in one
    timing; the result names the fastest and the speed-up over it (hand-computed from the fake medians)."""
    calls: list[list[str]] = []
    cpu = {"dense": 9.0, "shipped": 4.6, "onnx": 17.9, "openvino": 14.5, "openvino-int8": 7.0, "pytorch": 30.0}

    def bench(models, **kwargs):
        calls.append([Path(str(m)).name for m in models])
        return [_bench_row(cpu[Path(str(m)).name]) for m in models]

    monkeypatch.setattr(compress_timing, "installed_deployments", lambda: tuple(FAKE_MS))
    monkeypatch.setattr(compress_timing, "in_runtime", lambda model, directory, *a: str(model))
    monkeypatch.setattr(compress_timing, "dense_graphs",
                        lambda model, directory, names, **k: {n: f"{directory}/{n}" for n in names})
    monkeypatch.setattr(compress_timing, "bench", bench)
    deployment = Deployment(runtime="onnx-int8")
    result = compress_timing.measure(tmp_path / "dense", tmp_path / "shipped", deployment, 5, shipped_is_export=True,
                                     every_deployment=True)
    assert calls == [["dense", "shipped", "onnx", "openvino", "openvino-int8", "pytorch"]]  # one timing
    assert result["measured"] == pytest.approx(9.0 / 4.6)
    assert result["fastest_dense"] == {"deployment": "openvino-int8", "title": "OpenVINO int8", "ms": 7.0,
                                       "measured": pytest.approx(7.0 / 4.6)}
    assert [r["deployment"] for r in result["dense_deployments"]] == ["onnx-int8", "onnx", "openvino",
                                                                       "openvino-int8", "pytorch"]
    alone = compress_timing.measure(tmp_path / "dense", tmp_path / "shipped", deployment, 5, shipped_is_export=True)
    assert "fastest_dense" not in alone and calls[-1] == ["dense", "shipped"]  # the checks before training


def test_a_quantiser_that_fails_here_leaves_its_deployment_out_and_the_others_are_timed(tiny, tmp_path, monkeypatch):
    """ONNX Runtime's int8 quantiser failing on this machine's versions (as onnxruntime 1.30 did on torch 2.11's graphs
    on a GPU machine's image, which failed a 4-minute compress run at its last check): the int8 deployment is left
    out, said in one line with the quantiser's versions, and the fp32 graph of the same runtime is still exported."""
    pytest.importorskip("onnxruntime")
    import onnxruntime.quantization

    def broken(*args, **kwargs):
        raise RuntimeError("[ShapeInferenceError] Inferred shape and existing shape differ in dimension 0: (384) vs "
                           "(2)")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", broken)
    said: list[str] = []
    paths = deployments.dense_graphs(tiny, tmp_path / "graphs", ["pytorch", "onnx", "onnx-int8"], seq_len=16,
                                     say=said.append)
    assert set(paths) == {"pytorch", "onnx"} and paths["pytorch"] == str(tiny)
    assert Path(paths["onnx"]).is_file() and Path(paths["onnx"]).name == target("onnx").graph
    (line,) = [s for s in said if "left out" in s]
    assert line.startswith("ONNX Runtime int8 is left out of the comparison: ONNX Runtime int8 quantisation failed (")
    assert "onnxruntime " in line and "ShapeInferenceError" in line and "\n" not in line


def test_a_deployment_left_out_is_not_timed_nor_a_candidate_for_the_fastest(tiny, cache, tmp_path, monkeypatch):
    """Where a deployment's graph cannot be made here, the dense timing (``--runtime auto``) and compress's last check
    time the others and pick the fastest among them (hand-computed from the fake medians)."""
    calls: list[list[str]] = []

    def bench(models, **kwargs):
        calls.append([Path(str(m)).name for m in models])
        # the dense model in ONNX Runtime fp32 as fast as the fake's onnx row
        return [_bench_row({**FAKE_MS, "dense": FAKE_MS["onnx"], "shipped": 4.6}[Path(str(m)).name]) for m in models]

    def without_openvino_int8(model, directory, names, **kwargs):
        return {n: f"{directory}/{n}" for n in names if n != "openvino-int8"}

    for module in (deployments, compress_timing):
        monkeypatch.setattr(module, "installed_deployments", lambda: tuple(FAKE_MS))
        monkeypatch.setattr(module, "dense_graphs", without_openvino_int8)
        monkeypatch.setattr(module, "bench", bench)
    rows = deployments.dense_deployments(tiny, rounds=2)
    assert [r["deployment"] for r in rows] == ["onnx-int8", "onnx", "openvino", "pytorch"]
    assert deployments.fastest(rows)["deployment"] == "onnx-int8"  # 9.0 ms: OpenVINO int8's 7.0 was not timed
    monkeypatch.setattr(compress_timing, "in_runtime", lambda model, directory, *a: str(model))
    result = compress_timing.measure(tmp_path / "dense", tmp_path / "shipped", Deployment(runtime="onnx"), 5,
                                     shipped_is_export=True, every_deployment=True)
    assert calls[-1] == ["dense", "shipped", "onnx-int8", "openvino", "pytorch"]
    assert result["fastest_dense"] == {"deployment": "onnx-int8", "title": "ONNX Runtime int8", "ms": 9.0,
                                       "measured": pytest.approx(9.0 / 4.6)}


def _report(**overrides: Any) -> dict[str, Any]:
    """A compress report.json as the report reads it: 2x in ONNX Runtime int8, measured 1.94x."""
    report = {
        "model": "minilm", "deployment": {"runtime": "onnx-int8", "batch_size": 1, "seq_len": 128, "threads": 1},
        "target_speedup": 2.0, "measured_speedup": 1.94, "measured_range": [1.9, 2.0], "within_tolerance": True,
        "tolerance": 0.05, "latency_ms": {"dense": 9.0, "compressed": 9.0 / 1.94}, "clock": "cpu",
        "allocations": [{"rounds": 20, "allocated_for": 2.0, "predicted": 2.0, "measured": 1.97, "clock": "cpu"}],
        "teacher_metrics": {"accuracy": 0.87}, "metrics": {"accuracy": 0.85}, "shipped_metrics": None,
        "params": {"teacher": 22_000_000, "compressed": 15_000_000}, "flops": {"teacher": 10, "compressed": 5},
        "heads_per_layer": [6, 6], "neurons_per_layer": [700, 700], "layers": [0, 1], "layers_of": 2, "heads_of": 12,
        "neurons_of": 1536, "choice": None, "budget": "quick",
        "budget_settings": {"max_samples": 2000, "epochs": 1, "importance_samples": 512},
        "model_dir": "out/final", "shipped": "out/onnx/model_int8.onnx", "stages_dir": "out/stages",
        "fastest_dense": {"deployment": "openvino-int8", "title": "OpenVINO int8", "ms": 9.0 * 1.49 / 1.94,
                          "measured": 1.49},
        "dense_deployments": [
            {"deployment": "onnx-int8", "title": "ONNX Runtime int8", "clock": "cpu", "ms": 9.0, "fastest": False},
            {"deployment": "openvino-int8", "title": "OpenVINO int8", "clock": "cpu", "ms": 9.0 * 1.49 / 1.94,
             "fastest": True},
            {"deployment": "pytorch", "title": "PyTorch", "clock": "cpu", "ms": 30.0, "fastest": False}],
    }
    return report | overrides


def test_the_report_states_the_speedup_over_the_same_runtime_and_over_the_fastest_dense_deployment(tmp_path):
    report = _report()
    text = compress_report.markdown(report)
    assert ("1.94x over the dense model in ONNX Runtime int8; 1.49x over the fastest dense deployment, "
            "OpenVINO int8") in text
    assert "| **OpenVINO int8** (fastest) | 6.91 | 1.49x |" in text and "| PyTorch | 30.00 | 6.47x |" in text
    assert "`--runtime openvino-int8` (or `--runtime auto`) compresses for it instead" in text
    compress_report.write_report(tmp_path, report)
    assert json.loads((tmp_path / "report.json").read_text())["fastest_dense"]["deployment"] == "openvino-int8"
    assert (tmp_path / "speedup.png").stat().st_size > 0
    same = _report(fastest_dense={"deployment": "onnx-int8", "title": "ONNX Runtime int8", "ms": 9.0,
                                  "measured": 1.94})
    assert "which is also the fastest dense deployment here" in compress_report.markdown(same)
    assert "compresses for it instead" not in compress_report.markdown(same)
    # chosen by --runtime auto, then another ran the dense model faster in the final timing: said as such
    auto = compress_report.markdown(_report(runtime_asked="auto"))
    assert "in onnx-int8, batch 1 x 128 tokens, 1 thread(s) (`--runtime auto`: the fastest dense deployment" in auto
    assert ("`--runtime auto` chose ONNX Runtime int8, the fastest dense deployment in its timing at the start; in "
            "this one OpenVINO int8 ran the dense model 30% faster (`--runtime openvino-int8` compresses for it).") \
        in auto
    assert "compresses for it instead" not in auto and "`--runtime auto`" not in compress_report.markdown(same)
    alone = _report(fastest_dense=same["fastest_dense"], dense_deployments=_report()["dense_deployments"][:1])
    assert "1.94x over the dense model in ONNX Runtime int8, the only deployment installed" in \
        compress_report.markdown(alone)
    before = _report(fastest_dense=None, dense_deployments=None)  # a report of a run that did not time them
    assert "fastest dense deployment" not in compress_report.markdown(before)
    compress_report.plot(tmp_path / "before.png", before)


def test_the_plot_draws_the_speedup_over_the_fastest_dense_deployment(tmp_path, monkeypatch):
    import matplotlib.axes

    drawn: list[list[str]] = []
    original = matplotlib.axes.Axes.bar

    def bar(self, x, *args, **kwargs):
        drawn.append([str(label) for label in x])
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    compress_report.plot(tmp_path / "speedup.png", _report())
    assert drawn[-1][-2:] == ["shipped", "shipped vs\nOpenVINO int8"]


def test_every_deployment_title_names_its_runtime_and_precision():
    assert target("onnx-int8").title == "ONNX Runtime int8" and target("pytorch").title == "PyTorch"
    assert target("openvino").title == "OpenVINO"
