"""``ghostify bench``: latency of checkpoints and exports, side by side, on this machine."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..architectures import get_adapter, usable_positions
from ..checkpoint import load_config, load_model
from ..errors import GhostifyError
from ..export.onnx import example_batch, input_names
from ..export.runtime import GraphModel
from ..runtimes import graph_of
from ..settings import BenchDefaults

#: what an allocation failure says, in PyTorch (CPU allocator), ONNX Runtime and C++ (bad_alloc)
_OUT_OF_MEMORY = ("can't allocate memory", "not enough memory", "failed to allocate", "bad_alloc", "out of memory")


def _config(model: str | os.PathLike):
    """The config of a checkpoint, or of an exported graph (the config.json its export directory holds)."""
    found = graph_of(model)
    return load_config(found[1].parent if found is not None else model)


def check_positions(model: str | os.PathLike, config, seq_len: int) -> None:
    limit = usable_positions(config)
    if seq_len > limit:
        raise GhostifyError(f"--seq-len {seq_len} exceeds the {limit} tokens {model} can read (its position "
                            f"embeddings); use --seq-len {limit} or less")


def activation_bytes(config, batch: int, length: int, *, scores: bool) -> int:
    """A lower bound of the memory one forward pass needs beyond the weights: the int64 inputs (ids,
    mask, token types) and what one layer holds at once (its input and output, Q, K and V, the
    FFN's intermediate activations and, where the runtime materialises them, the attention
    scores), in fp32."""
    adapter = get_adapter(config)
    tokens = batch * length
    hidden = adapter.hidden_size(config)
    elements = tokens * (5 * hidden + adapter.ffn_size(config))
    if scores:
        elements += batch * adapter.num_heads(config) * length * length
    return 3 * 8 * tokens + 4 * elements


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (``MemAvailable``), None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(model: str | os.PathLike, config, batch: int, length: int) -> None:
    """Refuse a batch whose activations cannot fit in the available memory (before allocating them)."""
    available = available_memory()
    if available is None:
        return
    # graph runtimes, and families that compute attention themselves, materialise the score matrix
    scores = graph_of(model) is not None or not get_adapter(config).uses_attention_interface
    need = activation_bytes(config, batch, length, scores=scores)
    if need <= available:
        return
    per_row = activation_bytes(config, 1, length, scores=scores)
    fits = available // per_row
    fix = f"use --batch-size {fits} or less" if fits >= 1 else "use a shorter --seq-len"
    raise GhostifyError(f"--batch-size {batch} x --seq-len {length} needs about {_gb(need)} of memory for the activations "
                        f"of {model}, more than the {_gb(available)} available; {fix}")


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def guarded(model: str | os.PathLike, batch: int, length: int, call: Callable[[], Any]) -> Any:
    """``call()``, with an allocation failure as one line naming the model and the batch."""
    try:
        return call()
    except GhostifyError:
        raise
    except Exception as exc:  # ONNX Runtime's errors are no RuntimeError: recognised by their text
        text = str(exc)
        if not isinstance(exc, MemoryError) and not any(s in text.lower() for s in _OUT_OF_MEMORY):
            raise
        first = text.strip().splitlines()[0][:200] if text.strip() else type(exc).__name__
        raise GhostifyError(f"{model} ran out of memory at --batch-size {batch} x --seq-len {length} ({first}); "
                            "use a smaller --batch-size or --seq-len") from exc


def runner_for(model: str | os.PathLike, batch: int, length: int, threads: int,
               precision: str | None = None) -> tuple[str, Callable[[], Any]]:
    """What runs ``model`` ("pytorch", "onnx", "onnx (int8)", ...: ``Target.label``) and a call that runs one
    forward pass on a fixed batch; a graph at ``precision`` (None: its runtime's default on this CPU)."""
    found = graph_of(model)
    if found is not None:
        target, graph = found
        # no busy-waiting between runs: the models take turns, and an idle session's spinning threads
        # would compete with the running one (2 threads, batch 32, six int8 sessions: 602 -> 553 ms)
        net = GraphModel(graph, target, threads=threads, precision=precision, spinning=False)
        feeds = example_batch(load_config(graph.parent), net.inputs, batch, length, seed=0, padded=False)
        session, arrays = net.session, {k: v.numpy() for k, v in feeds.items()}
        return target.label, lambda: session.run(arrays)
    return "pytorch", module_runner(load_model(model).eval(), batch, length)


def module_runner(net: torch.nn.Module, batch: int, length: int) -> Callable[[], Any]:
    """A call that runs one forward pass of ``net`` on a fixed batch of random ids."""
    inputs = example_batch(net.config, input_names(net), batch, length, seed=0, padded=False)

    def run() -> Any:
        with torch.inference_mode():
            return net(**inputs)

    return run


def take_turns(runs: Sequence[Callable[[], Any]], *, rounds: int, warmup: int) -> tuple[list[list[float]], list[list[float]]]:
    """Wall-clock and CPU milliseconds of every call of each of ``runs`` over ``rounds`` rounds (after
    ``warmup`` untimed ones), the runs taking turns within each round."""
    for _ in range(warmup):
        for run in runs:
            run()
    wall: list[list[float]] = [[] for _ in runs]
    cpu: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for i, run in enumerate(runs):
            w0, c0 = time.perf_counter(), time.process_time()
            run()
            cpu[i].append(1000 * (time.process_time() - c0))
            wall[i].append(1000 * (time.perf_counter() - w0))
    return wall, cpu


def check_counts(**counts: int) -> None:
    """Refuse a count of ``bench``'s (``batch_size=``, ``rounds=``, ...) that is not a whole number of at least 1
    (``warmup``: 0), in one line naming its flag."""
    for key, value in counts.items():
        least = 0 if key == "warmup" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise GhostifyError(f"--{key.replace('_', '-')} {value!r} must be a whole number of at least {least}")


def bench(
    models: Sequence[str | os.PathLike],
    *,
    batch_size: int = BenchDefaults.batch_size,
    seq_len: int = BenchDefaults.seq_len,
    threads: int = BenchDefaults.threads,
    rounds: int = BenchDefaults.rounds,
    warmup: int = BenchDefaults.warmup,
) -> list[dict[str, Any]]:
    """Median latency of each of ``models`` (checkpoints, export directories, graph files) over
    ``rounds`` rounds, the models taking turns within each round (so that a slower or busier
    moment of the machine hits them all alike), and the speed-up against the first model.

    Wall-clock milliseconds per forward pass, and CPU milliseconds (all threads of this process).
    Before anything is loaded, ``seq_len`` is checked against every model's positions and the
    batch against the memory available (an allocation that fails anyway is one line too).

    Example:
        >>> bench(["out/dense", "out/pruned", "out/onnx/model_int8.onnx"], threads=1)  # doctest: +SKIP
    """
    check_counts(batch_size=batch_size, seq_len=seq_len, threads=threads, rounds=rounds, warmup=warmup)
    if not models:
        raise GhostifyError("name at least one model to measure")
    configs = [_config(m) for m in models]
    for model, config in zip(models, configs):  # every model, before any is loaded or timed
        check_positions(model, config, seq_len)
    for model, config in zip(models, configs):
        check_memory(model, config, batch_size, seq_len)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runners = [guarded(m, batch_size, seq_len, lambda m=m: runner_for(m, batch_size, seq_len, threads)) for m in models]
        runs = [lambda m=m, run=run: guarded(m, batch_size, seq_len, run) for m, (_, run) in zip(models, runners)]
        wall, cpu = take_turns(runs, rounds=rounds, warmup=warmup)
    finally:
        torch.set_num_threads(previous)
    first = statistics.median(wall[0])
    rows = []
    for model, name, (kind, _), w, c in zip(models, short_names(models), runners, wall, cpu):
        quartiles = statistics.quantiles(w, n=4) if len(w) > 1 else [w[0], w[0], w[0]]
        rows.append({"model": str(model), "runtime": kind, "median_ms": statistics.median(w),
                     "p25_ms": quartiles[0], "p75_ms": quartiles[2], "cpu_median_ms": statistics.median(c),
                     "speedup": first / statistics.median(w), "batch_size": batch_size, "seq_len": seq_len,
                     "threads": threads, "rounds": rounds, "name": name})
    return rows


def short_names(models: Sequence[str | os.PathLike]) -> list[str]:
    """The fewest trailing path parts that tell the models apart (``06-final``, ``onnx/model.onnx``,
    ``onnx/model_int8.onnx``); a name given twice keeps its full path."""
    parts = [Path(str(m)).parts or (str(m),) for m in models]
    names = []
    for i, own in enumerate(parts):
        others = [p for j, p in enumerate(parts) if j != i and p != own]
        k = 1
        while k < len(own) and any(p[-k:] == own[-k:] for p in others):
            k += 1
        names.append(str(Path(*own[-k:])))
    return names
