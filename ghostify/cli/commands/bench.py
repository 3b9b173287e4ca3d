from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ...errors import GhostifyError
from ...runtimes import deployment_names, graph_suffixes
from ...settings import BenchDefaults
from ..app import app
from ..console import err, out, print_json
from ..options import Json


@app.command(
    epilog="Examples:\n\n"
    "ghostify bench bert-base-uncased runs/quick/06-final runs/quick/onnx/model_int8.onnx\n\n"
    "ghostify bench out/dense out/pruned --batch-size 32 --threads 2 --json\n\n"
    "ghostify bench out/teacher --all-runtimes",
)
def bench(
    models: Annotated[list[str], typer.Argument(help="Checkpoints, export directories or graph files (" + ", ".join(graph_suffixes()) + "); the first is the baseline.", show_default=False)],
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per forward pass.")] = BenchDefaults.batch_size,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence (no padding); at most what every model can read.")] = BenchDefaults.seq_len,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads for PyTorch and the graph runtimes.")] = BenchDefaults.threads,
    rounds: Annotated[int, typer.Option("--rounds", help="Timed forward passes per model, the models taking turns.")] = BenchDefaults.rounds,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed forward passes per model first.")] = BenchDefaults.warmup,
    all_runtimes: Annotated[bool, typer.Option("--all-runtimes", help="Time one checkpoint in every installed deployment (" + ", ".join(deployment_names()) + ": each exported here, int8 calibrated on random ids) and name the fastest; cached for `--runtime auto`.")] = False,
    json_output: Json = False,
) -> None:
    """Latency of models side by side on this machine: median and quartiles of wall-clock time per
    forward pass, CPU time, and the speed-up against the first model.

    The models take turns within each round, so a busier moment of the machine hits them alike.
    Inputs are random token ids of --batch-size x --seq-len, the same for every model.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    if all_runtimes:
        _all_runtimes(models, batch_size, seq_len, threads, rounds, warmup, json_output)
        return
    rows = steps.bench(models, batch_size=batch_size, seq_len=seq_len, threads=threads, rounds=rounds, warmup=warmup)
    if json_output:
        print_json(rows)
        return
    table = Table(title=f"batch {batch_size}, sequence {seq_len}, {threads} thread(s), {rounds} rounds: milliseconds per forward pass")
    for column in ("#", "model", "runtime", "median", "p25-p75", "CPU", "speed-up"):
        # names wrap rather than end in "…": the fp32 and int8 graphs of one export differ only at the end
        table.add_column(column, justify="left" if column in ("model", "runtime") else "right",
                         overflow="fold" if column == "model" else "ellipsis")
    for i, row in enumerate(rows, 1):
        table.add_row(str(i), row["name"], row["runtime"], f"{row['median_ms']:.2f}", f"{row['p25_ms']:.2f}-{row['p75_ms']:.2f}",
                      f"{row['cpu_median_ms']:.2f}", f"{row['speedup']:.2f}x")
    out.print(table)
    if any(row["name"] != row["model"] for row in rows):
        for i, row in enumerate(rows, 1):  # the full names, one a line (never cut)
            out.print(f"{i}: {row['model']}", markup=False)


def _all_runtimes(models: list[str], batch_size: int, seq_len: int, threads: int, rounds: int, warmup: int,
                  json_output: bool) -> None:
    """``--all-runtimes``: the one checkpoint in every installed deployment, the fastest named."""
    from ...steps.deployments import dense_deployments, fastest

    if len(models) != 1:
        raise GhostifyError(f"--all-runtimes times one checkpoint in every runtime, and {len(models)} models were "
                            "given; name one")
    rows = dense_deployments(models[0], batch_size=batch_size, seq_len=seq_len, threads=threads, rounds=rounds,
                             warmup=warmup, refresh=True, progress=lambda line: err.print(line, markup=False))
    if json_output:
        print_json(rows)
        return
    clock = "CPU" if rows[0]["clock"] == "cpu" else "wall-clock"
    table = Table(title=f"{models[0]} in every installed runtime: batch {batch_size}, sequence {seq_len}, "
                        f"{threads} thread(s), {rounds} rounds; milliseconds per forward pass")
    columns = ("deployment", "runtime", f"{clock} median", "wall median", "wall p25-p75",
               f"speed-up vs {rows[0]['deployment']}")
    for column in columns:
        table.add_column(column, justify="left" if column in ("deployment", "runtime") else "right",
                         no_wrap=column == "deployment")
    for row in rows:
        table.add_row(row["deployment"] + (" (fastest)" if row["fastest"] else ""), row["title"], f"{row['ms']:.2f}",
                      f"{row['wall_ms']:.2f}", f"{row['p25_ms']:.2f}-{row['p75_ms']:.2f}", f"{row['speedup']:.2f}x")
    out.print(table)
    best = fastest(rows)
    out.print(f"fastest: {best['deployment']} ({best['title']}), {best['ms']:.2f} ms ({clock} time); ship in it with "
              f"`--runtime {best['deployment']}`, or let `--runtime auto` pick it", markup=False)
