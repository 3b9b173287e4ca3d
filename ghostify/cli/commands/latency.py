from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ...latency_model import RUNTIMES, Deployment
from ...settings import BenchDefaults, LatencyDefaults
from ..app import app
from ..console import err, out, print_json
from ..options import Json, Model, Overwrite, Seed


@app.command(
    epilog="Examples:\n\n"
    "ghostify latency sentence-transformers/all-MiniLM-L6-v2 --runtime onnx-int8\n\n"
    "ghostify latency out/scored -o out/latency --runtime pytorch --batch-size 32 --threads 2",
)
def latency(
    model: Model,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Directory to write latency.json to (must not exist unless --overwrite); the model is cached either way.", show_default=False)] = None,
    runtime: Annotated[str, typer.Option("--runtime", help=f"What runs the model: {', '.join(RUNTIMES)} (auto: the installed one that runs MODEL fastest in this shape, timed here and said).")] = Deployment.runtime,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per forward pass.")] = Deployment.batch_size,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence (no padding).")] = Deployment.seq_len,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads for PyTorch and the graph runtimes.")] = Deployment.threads,
    rounds: Annotated[int, typer.Option("--rounds", help="Timed forward passes per probe model, the models taking turns.")] = BenchDefaults.rounds,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed forward passes per probe model first.")] = BenchDefaults.warmup,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even when this machine's cache has the model.")] = False,
    seed: Seed = LatencyDefaults.seed,
    overwrite: Overwrite = False,
    json_output: Json = False,
) -> None:
    """Measure what one forward pass costs on this machine as a function of the heads and FFN neurons
    pruning keeps: a constant, and per kept layer a constant plus a cost per head and per neuron.

    Small probe models of MODEL's original architecture (random weights, one or two layers, pruned to a
    few widths) are timed taking turns in --runtime (medians of CPU time on one thread, so that other
    processes do not count; of wall-clock time on more), the costs fitted by least squares, and checked on
    whole models of full depth the fit did not see (dense, half width, a different width per layer).
    The result is cached per geometry, deployment and machine in ghostify's cache directory
    ($GHOSTIFY_CACHE, else $XDG_CACHE_HOME/ghostify, else ~/.cache/ghostify): `prune --speedup` and
    `compress` read it. MODEL is only read.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.latency(model, output, runtime=runtime, batch_size=batch_size, seq_len=seq_len, threads=threads,
                           rounds=rounds, warmup=warmup, refresh=refresh, seed=seed, overwrite=overwrite,
                           progress=lambda line: err.print(line, markup=False))
    if json_output:
        print_json(result.to_dict())
    else:
        print_latency(result)
    if output is not None:
        err.print(f"wrote {output}", markup=False)


def print_latency(result) -> None:
    """The probes and validation models, measured against predicted, and the fitted costs."""
    table = Table(title=f"{result.geometry.describe()}; {result.deployment.describe()}: milliseconds per forward pass")
    for column in ("model", "layers", "heads", "neurons", "hidden", "measured", "predicted", "error"):
        # a per-layer list of widths wraps rather than ending in "…"
        table.add_column(column, justify="left" if column == "model" else "right", no_wrap=column == "model",
                         overflow="fold" if column in ("heads", "neurons") else "ellipsis")
    for fitted, rows in ((True, result.probes), (False, result.validation)):
        for row in rows:  # the probes by their widths; the whole models the fit did not see by name
            error = (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"]
            hidden = row.get("hidden") or result.geometry.hidden_size
            table.add_row("probe" if fitted else row["name"], str(len(row["heads"])), _widths(row["heads"]), _widths(row["neurons"]),
                          str(hidden), f"{row['measured_ms']:.2f}", f"{row['predicted_ms']:.2f}", f"{error:+.1%}")
    out.print(table)
    out.print(f"fitted: {result.base_ms:.3f} ms + per layer {result.layer_ms:.3f} ms + per head {result.head_ms:.4f} ms "
              f"+ per neuron {result.neuron_ms:.6f} ms; dense {result.dense_ms():.2f} ms", markup=False)
    if result.per_channel is not None:
        c = result.per_channel
        out.print(f"per residual channel removed: {c.base:.5f} ms + per layer {c.layer:.5f} ms + per head {c.head:.6f} ms "
                  f"+ per neuron {c.neuron:.8f} ms less", markup=False)
    worst = result.max_error()
    if worst is not None:
        out.print(f"largest error on the whole models the fit did not see: {worst:.1%}", markup=False)
    clock = "CPU time (one thread: what other processes take does not count)" if result.deployment.threads == 1 else "wall-clock time"
    out.print(f"machine: {result.machine}; medians of {clock}", markup=False)


def _widths(values: list[int]) -> str:
    """One number where every layer keeps the same, else the list."""
    return str(values[0]) if len(set(values)) == 1 else ",".join(map(str, values))
