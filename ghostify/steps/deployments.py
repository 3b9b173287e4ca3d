"""The dense model in every installed deployment, timed taking turns: which runtime is fastest for a deployment's
shape on this machine. ``bench --all-runtimes`` prints it, ``--runtime auto`` (``latency``, ``compress``) ships in
the fastest, and compress's report states its speed-up over the fastest too.

The result is cached like a latency model: per model structure, deployment shape and machine (the CPU and the
version of every runtime timed), so that a re-run of ``compress --runtime auto`` does not time it again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..checkpoint import load_config
from ..errors import GhostifyError
from ..latency_model import Deployment
from ..record import RECORD_KEY
from ..runtimes import AUTO, Runtime, Target, graph_of, installed_deployments, target
from ..settings import BenchDefaults, DataSettings, TaskSettings
from .bench import bench, check_counts, check_memory, check_positions
from .machine_cache import cache_dir, machine_key, measuring, store
from .timed_graphs import timed_graph

#: the layout of a cached timing of the dense deployments; a file of another is measured again
DEPLOYMENTS_FORMAT = 1
#: what the messages about the cache call it
_WHAT = "the dense model's timing in every runtime"


def dense_deployments(
    model: str | os.PathLike,
    *,
    batch_size: int = BenchDefaults.batch_size,
    seq_len: int = BenchDefaults.seq_len,
    threads: int = BenchDefaults.threads,
    rounds: int = BenchDefaults.rounds,
    warmup: int = BenchDefaults.warmup,
    data: DataSettings | None = None,
    task_settings: TaskSettings = TaskSettings(),
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The checkpoint ``model`` in every installed deployment (``pytorch``, ``onnx``, ``onnx-int8``, ...: the
    runtimes of ``ghostify.runtimes`` whose packages are here), timed taking turns on ``batch_size`` x ``seq_len``
    random ids on ``threads`` threads: one row per deployment (:func:`deployment_rows`: medians, the clock the
    choice reads, the speed-up against the first row), the fastest marked. A calibrated int8 quantisation reads a
    few training examples of ``data``'s task (``task_settings``: its columns), else random ids. From the cache when
    this model's structure was timed in this shape on this machine before (``refresh`` times it again and caches
    that).

    Example:
        >>> rows = dense_deployments("out/teacher", threads=1)          # doctest: +SKIP
        >>> fastest(rows)["deployment"]                                  # doctest: +SKIP
        'openvino-int8'
    """
    say = progress or (lambda line: None)
    check_counts(batch_size=batch_size, seq_len=seq_len, threads=threads, rounds=rounds, warmup=warmup)
    found = graph_of(model)
    if found is not None:
        raise GhostifyError(f"{model} is an {found[0].runtime.format_title} export: timing the model in every runtime "
                            "exports it to each, so pass the checkpoint it was exported from")
    config = load_config(model)
    check_positions(model, config, seq_len)
    check_memory(model, config, batch_size, seq_len)
    names = installed_deployments()
    key = {"format": DEPLOYMENTS_FORMAT, "structure": structure_digest(config), "batch_size": batch_size,
           "seq_len": seq_len, "threads": threads, "deployments": list(names), "machine": machine_key(*names)}
    path = cache_dir() / "deployments" / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]}.json"
    with measuring(path, say, _WHAT):
        rows = None if refresh else _cached(path, key)
        if rows is not None:
            say(f"timed before on this machine: {path}")
            return rows
        with tempfile.TemporaryDirectory(prefix="ghostify-deployments-") as tmp:
            paths = dense_graphs(model, Path(tmp), names, seq_len=seq_len, data=data, task_settings=task_settings,
                                 say=say)
            names = tuple(n for n in names if n in paths)  # a runtime that failed here: said, and left out
            say(f"timing the dense model in {len(names)} deployments x {rounds} rounds (batch {batch_size} x "
                f"{seq_len} tokens, {threads} thread(s))")
            timed = bench([paths[n] for n in names], batch_size=batch_size, seq_len=seq_len, threads=threads,
                          rounds=rounds, warmup=warmup)
        rows = deployment_rows(names, timed)
        if store(path, {"key": key, "rounds": rounds, "rows": rows}, _WHAT):
            say(f"cached as {path}")
    return rows


def structure_digest(config: Any) -> str:
    """What the speed of a model depends on, as a digest: its config without what names where it came from (its
    path, the transformers version, the labels' names, ghostify's history); the record's kept heads and
    neurons stay."""
    data = {k: v for k, v in config.to_dict().items()
            if k not in ("_name_or_path", "transformers_version", "id2label", "label2id")}
    data["num_labels"] = getattr(config, "num_labels", None)
    if isinstance(data.get(RECORD_KEY), dict):
        data[RECORD_KEY] = {k: v for k, v in data[RECORD_KEY].items() if k != "history"}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def dense_graphs(model: str | os.PathLike, directory: Path, names: Sequence[str], *, seq_len: int,
                 data: DataSettings | None = None, task_settings: TaskSettings = TaskSettings(),
                 say: Callable[[str], None] = lambda line: None) -> dict[str, str]:
    """The checkpoint ``model`` as each deployment of ``names`` runs it (:func:`ghostify.steps.timed_graphs
    .timed_graph`): the checkpoint for PyTorch, else a graph in ``directory``, one export per runtime (its int8
    graph beside the full-precision one where ``names`` has both). A graph this machine cannot make (an int8
    quantiser that fails on the installed versions) leaves its deployment out of the result, said in one line:
    the other deployments are still timed."""
    paths: dict[str, str] = {}
    exported: dict[str, Path | None] = {}  # a runtime's export directory (None: it could not be made here)
    for name in names:
        chosen = target(name)
        if chosen.graph is None:
            paths[name] = str(model)
            continue
        if chosen.runtime.name not in exported:
            int8 = any(target(n).int8 and target(n).runtime.name == chosen.runtime.name for n in names)
            say(f"exporting {model} to {chosen.runtime.title}{' (and int8)' if int8 else ''} to time it")
            exported[chosen.runtime.name] = _export(model, directory, chosen.runtime, int8, seq_len=seq_len,
                                                    data=data, task_settings=task_settings, say=say)
        out = exported[chosen.runtime.name]
        if out is not None and (out / chosen.graph).is_file():
            paths[name] = str(out / chosen.graph)
    return paths


def _export(model: str | os.PathLike, directory: Path, runtime: Runtime, int8: bool, *, seq_len: int,
            data: DataSettings | None, task_settings: TaskSettings, say: Callable[[str], None]) -> Path | None:
    """``runtime``'s graph of ``model`` in a new folder of ``directory``, with its int8 graph beside it where
    ``int8`` asks; where the int8 quantisation fails here, the full-precision graph alone; None where that fails
    too. Each failure is said: a runtime's own clear error (a broken quantiser names its versions)."""
    for with_int8 in (True, False) if int8 else (False,):
        out = directory / (runtime.name if with_int8 == int8 else f"{runtime.name}-fp32")
        try:
            timed_graph(model, out, Target(runtime, int8=with_int8), seq_len=seq_len, data=data,
                        task_settings=task_settings)
            return out
        except GhostifyError as exc:
            say(f"{runtime.title}{' int8' if with_int8 else ''} is left out of the comparison: {exc}")
    return None


def deployment_rows(names: Sequence[str], timed: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per deployment of ``names`` from ``bench``'s rows of its model (in the same order): its name and
    title, the clock the choice reads (CPU time on one thread, where other processes do not count; wall-clock time
    on more) and its median ``ms``, the wall-clock and CPU medians, the speed-up against the first row, and whether
    it is the fastest (the first of the fastest, on a tie)."""
    rows = []
    for name, row in zip(names, timed):
        clock = "cpu" if row["threads"] == 1 else "wall"
        rows.append({"deployment": name, "title": target(name).title, "clock": clock,
                     "ms": row["cpu_median_ms"] if clock == "cpu" else row["median_ms"], "wall_ms": row["median_ms"],
                     "p25_ms": row["p25_ms"], "p75_ms": row["p75_ms"], "cpu_ms": row["cpu_median_ms"]})
    best = min(rows, key=lambda r: r["ms"])
    for row in rows:
        row["speedup"] = rows[0]["ms"] / row["ms"]
        row["fastest"] = row is best
    return rows


def fastest(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The row :func:`deployment_rows` marked fastest."""
    return next(r for r in rows if r["fastest"])


def chosen_deployment(model: str | os.PathLike, deployment: Deployment, *, data: DataSettings | None = None,
                      task_settings: TaskSettings = TaskSettings(),
                      rounds: int = BenchDefaults.rounds, warmup: int = BenchDefaults.warmup,
                      say: Callable[[str], None] = lambda line: None) -> Deployment:
    """``deployment`` as it is, or where its runtime is ``auto``, with the fastest installed deployment of the
    dense ``model`` in its shape (:func:`dense_deployments`: from the cache, or timed now), said in one line."""
    if deployment.runtime != AUTO:
        return deployment
    rows = dense_deployments(model, batch_size=deployment.batch_size, seq_len=deployment.seq_len,
                             threads=deployment.threads, rounds=rounds, warmup=warmup, data=data,
                             task_settings=task_settings, progress=say)
    best = fastest(rows)
    others = ", ".join(f"{r['deployment']} {r['ms']:.2f}" for r in sorted(rows, key=lambda r: r["ms"]) if r is not best)
    say(f"--runtime auto: {best['deployment']} ({best['title']}) runs the dense model fastest here, {best['ms']:.2f} ms "
        f"({others} ms; {best['clock']} time, batch {deployment.batch_size} x {deployment.seq_len}, "
        f"{deployment.threads} thread(s))")
    return dataclasses.replace(deployment, runtime=best["deployment"])


def _cached(path: Path, key: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows cached at ``path`` for ``key``, or None (a corrupt or mismatched file is ignored with a warning)."""
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text())
        rows = found["rows"]
        if found["key"] != key:
            raise ValueError("it was measured for another model, shape or machine")
        if not rows or [r["deployment"] for r in rows] != key["deployments"] or \
                sum(bool(r["fastest"]) for r in rows) != 1 or \
                not all(isinstance(r["ms"], (int, float)) and r["ms"] > 0 for r in rows):
            raise ValueError("its rows are not one per deployment with one fastest")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        warnings.warn(f"ignoring the cached timing {path}: {exc}", stacklevel=3)
        return None
    return rows


__all__ = ["DEPLOYMENTS_FORMAT", "chosen_deployment", "dense_deployments", "dense_graphs", "deployment_rows",
           "fastest", "structure_digest"]
