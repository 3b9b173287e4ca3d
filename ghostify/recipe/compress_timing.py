"""``compress``'s clock: the dense and the compressed model taking turns in the target runtime (the checkpoint
itself, or its ONNX graph), medians and spread of wall-clock and CPU time."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..latency_model import Deployment
from ..runtimes import INT8, target
from ..settings import BenchDefaults, DataSettings
from ..steps import bench, export


def graph_name(runtime: str) -> str:
    """The file of the graph the deployment ``runtime`` runs (``model_int8.onnx``, ``model.xml``)."""
    return str(target(runtime).graph)


#: training examples a calibrated int8 quantisation (OpenVINO's) reads for a graph that is only timed: what is
#: timed is which operations run in int8, not how well they are calibrated (the shipped graph reads the export's)
TIMING_CALIBRATION = 32


class DenseExports:
    """The dense model in the target runtime, exported once per compress run: every check times against it
    (``data``: the task's, for a runtime whose int8 quantisation is calibrated)."""

    def __init__(self, data: DataSettings | None = None) -> None:
        self.data = data
        self._directory: tempfile.TemporaryDirectory | None = None
        self._graphs: dict[str, str] = {}

    def get(self, model: Path, deployment: Deployment) -> str:
        if str(model) not in self._graphs:
            if self._directory is None:
                self._directory = tempfile.TemporaryDirectory(prefix="ghostify-compress-dense-")
            directory = Path(self._directory.name) / f"dense-{len(self._graphs)}"
            self._graphs[str(model)] = in_runtime(model, directory, deployment, self.data)
        return self._graphs[str(model)]

    def close(self) -> None:
        if self._directory is not None:
            self._directory.cleanup()


def measure(dense: Path, compressed: Path, deployment: Deployment, rounds: int, *,
            shipped_is_export: bool = False, dense_exports: DenseExports | None = None,
            data: DataSettings | None = None) -> dict[str, Any]:
    """The dense and the compressed model taking turns in the target runtime: medians and spread
    (``dense_exports``: where the dense model's export is kept between checks)."""
    with tempfile.TemporaryDirectory(prefix="ghostify-compress-") as tmp:
        data = data if data is not None else dense_exports.data if dense_exports is not None else None
        if dense_exports is not None:
            models = [dense_exports.get(dense, deployment)]
        else:
            models = [in_runtime(dense, Path(tmp) / "dense", deployment, data)]
        models.append(compressed if shipped_is_export else
                      in_runtime(compressed, Path(tmp) / "compressed", deployment, data))
        rows = bench(models, batch_size=deployment.batch_size, seq_len=deployment.seq_len, threads=deployment.threads,
                     rounds=rounds, warmup=max(1, BenchDefaults.warmup))
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
    return result


def in_runtime(model: Path, directory: Path, deployment: Deployment, data: DataSettings | None = None) -> str:
    """``model`` as the target runtime runs it: the checkpoint itself, or its graph (a calibrated int8 one on a
    few of ``data``'s training examples)."""
    chosen = target(deployment.runtime)
    if chosen.graph is None:
        return str(model)
    calibration: dict[str, Any] = {}
    if chosen.int8 and chosen.runtime.calibrated and data is not None:
        calibration = {"task": data.task, "dataset": data.dataset, "text_columns": data.text_columns,
                       "label_column": data.label_column, "max_length": data.max_length,
                       "calibration_samples": TIMING_CALIBRATION}
    export(model, directory, format=chosen.runtime.name, quantize=INT8 if chosen.int8 else None, **calibration)
    return str(directory / chosen.graph)


__all__ = ["DenseExports", "graph_name", "in_runtime", "measure"]
