"""``ghostify bench``: latency of checkpoints and exports, side by side, on this machine."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import load_config, load_model
from ..errors import GhostifyError
from ..export.onnx import example_batch, input_names
from ..export.runtime import OnnxModel, onnx_path


def _runner(model: str | os.PathLike, batch: int, length: int, threads: int) -> tuple[str, Callable[[], Any]]:
    """What ``model`` is ("pytorch" or "onnx") and a call that runs one forward pass on a fixed batch."""
    graph = onnx_path(model)
    if graph is not None:
        session = OnnxModel(graph, threads=threads)
        feeds = example_batch(load_config(graph.parent), session.inputs, batch, length, seed=0, padded=False)
        return "onnx (int8)" if "int8" in graph.name else "onnx", lambda: session(**feeds)
    net = load_model(model).eval()
    inputs = example_batch(net.config, input_names(net), batch, length, seed=0, padded=False)

    def run() -> Any:
        with torch.inference_mode():
            return net(**inputs)

    return "pytorch", run


def bench(
    models: Sequence[str | os.PathLike],
    *,
    batch_size: int = 1,
    seq_len: int = 128,
    threads: int = 1,
    rounds: int = 20,
    warmup: int = 3,
) -> list[dict[str, Any]]:
    """Median latency of each of ``models`` (checkpoints, export directories, ``.onnx`` files) over
    ``rounds`` rounds, the models taking turns within each round (so that a slower or busier
    moment of the machine hits them all alike), and the speed-up against the first model.

    Wall-clock milliseconds per forward pass, and CPU milliseconds (all threads of this process).

    Example:
        >>> bench(["out/dense", "out/pruned", "out/onnx/model_int8.onnx"], threads=1)  # doctest: +SKIP
    """
    for name, value in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--threads", threads),
                        ("--rounds", rounds)):
        if value < 1:
            raise GhostifyError(f"{name} {value} must be at least 1")
    if warmup < 0:
        raise GhostifyError(f"--warmup {warmup} must be at least 0")
    if not models:
        raise GhostifyError("name at least one model to measure")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runners = [_runner(m, batch_size, seq_len, threads) for m in models]
        for _ in range(warmup):
            for _, run in runners:
                run()
        wall: list[list[float]] = [[] for _ in runners]
        cpu: list[list[float]] = [[] for _ in runners]
        for _ in range(rounds):
            for i, (_, run) in enumerate(runners):
                w0, c0 = time.perf_counter(), time.process_time()
                run()
                cpu[i].append(1000 * (time.process_time() - c0))
                wall[i].append(1000 * (time.perf_counter() - w0))
    finally:
        torch.set_num_threads(previous)
    first = statistics.median(wall[0])
    rows = []
    for model, (kind, _), w, c in zip(models, runners, wall, cpu):
        quartiles = statistics.quantiles(w, n=4) if len(w) > 1 else [w[0], w[0], w[0]]
        rows.append({"model": str(model), "runtime": kind, "median_ms": statistics.median(w),
                     "p25_ms": quartiles[0], "p75_ms": quartiles[2], "cpu_median_ms": statistics.median(c),
                     "speedup": first / statistics.median(w), "batch_size": batch_size, "seq_len": seq_len,
                     "threads": threads, "rounds": rounds, "name": Path(str(model)).name})
    return rows
