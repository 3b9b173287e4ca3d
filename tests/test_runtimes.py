"""The runtime registry (issue 47): every runtime is one module of ``ghostify.runtimes``, found there by the
registry; a deployment name maps to its runtime and graph; a runtime whose package is missing is refused in one
line naming its extra; latency models of different runtimes (and runtime versions) are measured and cached apart.
These tests go over every registered runtime, so a new one is checked without a line here."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from ghostify import steps
from ghostify.latency_model import RUNTIMES, Deployment, LatencyModel
from ghostify.runtimes import AUTO, DEFAULT_DEPLOYMENT, deployment_names, graph_of, graph_runtimes, runtimes, target
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import run_cli

GRAPHS = [r.name for r in graph_runtimes()]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))


def test_every_module_of_the_package_is_a_registered_runtime():
    from pathlib import Path

    import ghostify.runtimes as package

    modules = sorted(p.stem for p in Path(package.__file__).parent.glob("*.py") if p.stem not in ("__init__", "base"))
    assert sorted(r.name for r in runtimes()) == modules  # a runtime is named as its module
    # the --runtime choices: every deployment, then auto (the fastest installed one, timed)
    assert RUNTIMES == (*deployment_names(), AUTO) and RUNTIMES[0] == DEFAULT_DEPLOYMENT == Deployment().runtime
    for name in deployment_names():  # each name is one runtime's full-precision or int8 graph
        chosen = target(name)
        assert chosen.name == name and name in chosen.runtime.deployments
        assert chosen.graph == (chosen.runtime.int8_graph if chosen.int8 else chosen.runtime.graph)
    assert len(set(deployment_names())) == len(deployment_names())
    assert len({r.suffix for r in graph_runtimes()}) == len(graph_runtimes())  # a graph file names its runtime


def test_an_unknown_runtime_is_one_line(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "model", "bert")
    code, _, err = run_cli(capsys, "latency", source, "--runtime", "tpu-int4")
    assert code != 0 and err.count("\n") == 1 and "unknown --runtime 'tpu-int4'" in err
    assert all(name in err for name in deployment_names())
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "x", "--format", "tpu")
    assert code != 0 and err.count("\n") == 1 and "--format 'tpu'" in err and all(name in err for name in GRAPHS)


@pytest.mark.parametrize("name", [r.name for r in runtimes() if r.extra])
def test_a_missing_extra_is_refused_in_one_line(tmp_path, capsys, monkeypatch, name):
    chosen = target(name).runtime
    source = tiny_checkpoint(tmp_path / "model", "bert")
    # an export directory of this runtime, as bench and eval find it (its graph is never read)
    export = tmp_path / "export"
    shutil.copytree(source, export)
    (export / chosen.graph).write_text("graph")
    for package in (*chosen.packages, *chosen.export_packages):  # as if never installed: importing it fails
        monkeypatch.setitem(sys.modules, package, None)
    install = f'pip install "ghostify[{chosen.extra}]"'
    data = write_toy_dataset(tmp_path / "data", train=8, validation=8)
    for args in (["export", source, "-o", tmp_path / "out", "--format", name],
                 ["latency", source, "--runtime", name],
                 ["bench", export, "--rounds", "1", "--seq-len", "8"],
                 ["eval", export / chosen.graph, "--dataset", data, "--text-columns", "sentence", "--label-column", "label"]):
        code, _, err = run_cli(capsys, *args)
        assert code != 0 and err.count("\n") == 1 and install in err and chosen.title in err, (args, err)
    assert not (tmp_path / "out").exists()


def test_latency_models_are_cached_per_runtime_and_version(tmp_path, monkeypatch):
    measured = []

    def fake_measure(config, geometry, deployment, machine, **_):  # what is cached, not how long it took
        measured.append((deployment.runtime, machine))
        return LatencyModel(geometry, deployment, machine, base_ms=1.0, layer_ms=1.0, head_ms=0.1,
                            neuron_ms=0.001 * len(measured))

    monkeypatch.setattr(sys.modules["ghostify.steps.latency"], "measure", fake_measure)
    source = tiny_checkpoint(tmp_path / "model", "bert")
    installed = [n for n in deployment_names() if not target(n).runtime.missing(export=True)]
    first = {n: steps.latency(source, runtime=n, seq_len=16) for n in installed}
    assert [runtime for runtime, _ in measured] == installed  # one measurement each: none reads another's
    for name in installed:  # each machine key names its runtime's versions
        assert all(version in measured[installed.index(name)][1] for version in target(name).versions())
    again = {n: steps.latency(source, runtime=n, seq_len=16) for n in installed}
    assert len(measured) == len(installed) and again == first  # then each is read back from its own entry
    files = sorted((tmp_path / "cache" / "latency").glob("*.json"))
    assert len(files) == len(installed)
    assert sorted(json.loads(f.read_text())["deployment"]["runtime"] for f in files) == sorted(installed)
    # a new version of the runtime is another machine as far as timings go: measured again
    import transformers

    monkeypatch.setattr(transformers, "__version__", "0.0-test")  # PyTorch's runtime runs transformers' modeling code
    steps.latency(source, runtime="pytorch", seq_len=16)
    assert len(measured) == len(installed) + 1 and "transformers 0.0-test" in measured[-1][1]


def test_a_graph_file_names_its_runtime(tmp_path, capsys):
    for chosen in graph_runtimes():
        missing = tmp_path / f"gone{chosen.suffix}"
        code, _, err = run_cli(capsys, "bench", missing)
        assert code != 0 and err.count("\n") == 1 and f"{chosen.format_title} model {missing} does not exist" in err
        (tmp_path / chosen.name).mkdir()
        (tmp_path / chosen.name / chosen.graph).write_text("")
        found, graph = graph_of(tmp_path / chosen.name)
        assert (found.runtime, found.int8, graph.name) == (chosen, False, chosen.graph)
        if chosen.int8_graph:
            (tmp_path / chosen.name / chosen.int8_graph).write_text("")
            assert graph_of(tmp_path / chosen.name / chosen.int8_graph)[0].int8
    assert graph_of(tiny_checkpoint(tmp_path / "model", "bert")) is None  # a checkpoint runs in PyTorch


def test_compress_ships_in_every_runtime(tmp_path):
    """compress's export stage is the target runtime's, and its shipped graph the one that runtime runs."""
    from ghostify.latency_model import Deployment
    from ghostify.recipe.compress import compress_recipe
    from ghostify.settings import BUDGETS

    for name in deployment_names():
        chosen = target(name)
        raw = compress_recipe("model", speedup=2, deployment=Deployment(runtime=name), budget=BUDGETS["quick"],
                              data={"task": "sst2"}, ghosts=False, teacher="${model}", seed=0)
        stages = {next(iter(s)): s[next(iter(s))] for s in raw["stages"] if next(iter(s)) == "export"}
        if chosen.graph is None:
            assert stages["export"]["when"] is False
            continue
        assert stages["export"]["format"] == chosen.runtime.name and stages["export"]["when"] is True
        assert stages["export"].get("quantize") == ("int8" if chosen.int8 else None)
        shipped = next(s["eval"] for s in raw["stages"] if "eval" in s and s["eval"].get("output") == "shipped-eval")
        assert shipped["model"] == f"${{{chosen.runtime.name}}}/{chosen.graph}"



def test_a_session_without_threads_computes_on_torchs_count(tmp_path):
    """ONNX Runtime's and OpenVINO's own default is every core: a session not given threads takes torch's count
    (one setting for a process), and one given threads keeps them."""
    import torch

    from ghostify.runtimes.base import session_threads
    from ghostify.runtimes.onnx import OrtSession

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert session_threads(None) == 1 and session_threads(3) == 3
        steps.export(tiny_checkpoint(tmp_path / "model", head="base"), tmp_path / "onnx", format="onnx")
        for threads, expected in ((None, 1), (2, 2)):
            options = OrtSession(tmp_path / "onnx" / "model.onnx", threads=threads).session.get_session_options()
            assert options.intra_op_num_threads == expected
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("name", ["onnx", "openvino"])
def test_a_quantiser_that_fails_says_so_in_one_line_with_its_versions_and_the_fp32_way(tmp_path, name):
    """A graph the quantiser cannot read (as onnxruntime 1.30's shape inference could not read torch 2.11's graphs on a
    GPU machine's image) is one line naming the versions and the fp32 runtime that works, not the quantiser's
    traceback or advice that fits `export` alone."""
    from ghostify.errors import GhostifyError
    from ghostify.runtimes import onnx as onnx_runtime
    from ghostify.runtimes import openvino as openvino_runtime

    pytest.importorskip("nncf" if name == "openvino" else "onnxruntime")
    source = tmp_path / ("model.onnx" if name == "onnx" else "model.xml")
    source.write_bytes(b"not a graph")
    with pytest.raises(GhostifyError) as raised:
        if name == "onnx":
            onnx_runtime.quantize_int8(source, tmp_path / "model.int8.onnx")
        else:
            openvino_runtime.quantize(source, tmp_path / "int8.xml", calibration=[{"input_ids": [[1]]}])
    message = str(raised.value)
    assert "\n" not in message and f"--runtime {name}" in message and "export without --quantize" in message
    versions = {"onnx": ("(onnxruntime ", ", onnx ", ", torch "), "openvino": ("(openvino ", ", nncf ")}[name]
    assert all(version in message for version in versions), message
    assert not (tmp_path / "model.int8.onnx").exists() and not (tmp_path / "model.int8.prep.onnx").exists()
