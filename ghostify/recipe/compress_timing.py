"""``compress``'s clock: the dense and the compressed model taking turns in the target runtime (the checkpoint
itself, or its graph), medians and spread of wall-clock and CPU time; at the end, the dense model in every installed
deployment too (the speed-up over the fastest of them); and ``--runtime auto``'s choice of deployment."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..latency_model import Deployment
from ..runtimes import installed_deployments, target
from ..settings import BenchDefaults, DataSettings, TaskSettings
from ..steps import bench
from ..steps.deployments import chosen_deployment, dense_graphs, deployment_rows, fastest
from ..steps.timed_graphs import timed_graph
from .compress_settings import CompressSettings


def graph_name(runtime: str) -> str:
    """The file of the graph the deployment ``runtime`` runs (``model_int8.onnx``, ``model.xml``)."""
    return str(target(runtime).graph)


class DenseExports:
    """The dense model in the target runtime, exported once per compress run: every check times against it
    (``data`` and ``task_settings``: the task's, for a runtime whose int8 quantisation is calibrated)."""

    def __init__(self, data: DataSettings | None = None, task_settings: TaskSettings = TaskSettings()) -> None:
        self.data, self.task_settings = data, task_settings
        self._directory: tempfile.TemporaryDirectory | None = None
        self._graphs: dict[str, str] = {}

    def get(self, model: Path, deployment: Deployment) -> str:
        if str(model) not in self._graphs:
            if self._directory is None:
                self._directory = tempfile.TemporaryDirectory(prefix="ghostify-compress-dense-")
            directory = Path(self._directory.name) / f"dense-{len(self._graphs)}"
            self._graphs[str(model)] = in_runtime(model, directory, deployment, self.data, self.task_settings)
        return self._graphs[str(model)]

    def close(self) -> None:
        if self._directory is not None:
            self._directory.cleanup()


def measure(dense: Path, compressed: Path, deployment: Deployment, rounds: int, *,
            shipped_is_export: bool = False, dense_exports: DenseExports | None = None,
            every_deployment: bool = False, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The dense and the compressed model taking turns in the target runtime: medians and spread
    (``dense_exports``: where the dense model's export is kept between checks, and the task data that calibrates an
    int8 graph). ``every_deployment``: the dense model in every other installed deployment takes turns with them
    too, and the result says which ran it fastest and the speed-up over that (``fastest_dense``); a deployment
    whose graph this machine cannot make (an int8 quantiser failing on its versions) is left out, said by ``say``."""
    with tempfile.TemporaryDirectory(prefix="ghostify-compress-") as tmp:
        exports = dense_exports if dense_exports is not None else DenseExports()  # no task data: random calibration
        data, task_settings = exports.data, exports.task_settings
        models = [exports.get(dense, deployment) if dense_exports is not None else
                  in_runtime(dense, Path(tmp) / "dense", deployment)]
        models.append(compressed if shipped_is_export else
                      in_runtime(compressed, Path(tmp) / "compressed", deployment, data, task_settings))
        others = [n for n in installed_deployments() if n != deployment.runtime] if every_deployment else []
        graphs = dense_graphs(dense, Path(tmp) / "others", others, seq_len=deployment.seq_len, data=data,
                              task_settings=task_settings, say=say)
        others = [n for n in others if n in graphs]  # a runtime that cannot make its graph here: said, left out
        rows = bench([*models, *(graphs[n] for n in others)], batch_size=deployment.batch_size,
                     seq_len=deployment.seq_len, threads=deployment.threads, rounds=rounds,
                     warmup=max(1, BenchDefaults.warmup))
    dense_ms, compressed_ms = rows[0]["median_ms"], rows[1]["median_ms"]
    result = {"clock": "wall", "dense_ms": dense_ms, "compressed_ms": compressed_ms, "measured": dense_ms / compressed_ms,
              # the speed-up from the quartiles: the range a busier or quieter moment of the machine gives
              "measured_low": rows[0]["p25_ms"] / rows[1]["p75_ms"],
              "measured_high": rows[0]["p75_ms"] / rows[1]["p25_ms"], "rounds": rounds,
              "wall_ms": {"dense": dense_ms, "compressed": compressed_ms},
              "cpu_ms": {"dense": rows[0]["cpu_median_ms"], "compressed": rows[1]["cpu_median_ms"]}}
    if deployment.threads == 1:
        # one thread: CPU time is the latency of a quiet machine, and other processes do not count in it
        # (as `ghostify latency` fits); the wall-clock figures stay in the report
        dense_cpu, compressed_cpu = rows[0]["cpu_median_ms"], rows[1]["cpu_median_ms"]
        result |= {"clock": "cpu", "dense_ms": dense_cpu, "compressed_ms": compressed_cpu,
                   "measured": dense_cpu / compressed_cpu}
    if every_deployment:
        result |= over_fastest(deployment_rows([deployment.runtime, *others], [rows[0], *rows[2:]]),
                               result["compressed_ms"])
    return result


def over_fastest(dense_rows: list[dict[str, Any]], compressed_ms: float) -> dict[str, Any]:
    """The dense model's row in each deployment (``dense_deployments``), and the fastest of them with the speed-up
    of the compressed model (``compressed_ms``, in the same clock) over it."""
    best = fastest(dense_rows)
    return {"dense_deployments": dense_rows,
            "fastest_dense": {"deployment": best["deployment"], "title": best["title"], "ms": best["ms"],
                              "measured": best["ms"] / compressed_ms}}


def chosen_runtime(settings: CompressSettings, say: Callable[[str], None]) -> CompressSettings:
    """``settings`` with ``--runtime auto`` resolved: the installed deployment that runs the dense model fastest in
    the deployment's shape (timed on a few of the task's examples, or read from this machine's cache)."""
    deployment = chosen_deployment(settings.model, settings.deployment, data=settings.data,
                                   task_settings=settings.task_settings, rounds=settings.rounds, say=say)
    return settings if deployment == settings.deployment else dataclasses.replace(settings, deployment=deployment)


def in_runtime(model: Path, directory: Path, deployment: Deployment, data: DataSettings | None = None,
               task_settings: TaskSettings = TaskSettings()) -> str:
    """``model`` as the target runtime runs it: the checkpoint itself, or its graph (a calibrated int8 one on a
    few of ``data``'s training examples, read with ``task_settings``' columns)."""
    return timed_graph(model, directory, target(deployment.runtime), seq_len=deployment.seq_len, data=data,
                       task_settings=task_settings)


__all__ = ["DenseExports", "chosen_runtime", "graph_name", "in_runtime", "measure", "over_fastest"]
