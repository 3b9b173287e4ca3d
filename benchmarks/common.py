"""Shared helpers for the benchmarks: machine description, BERT-base models, random batches,
side-by-side (interleaved) timing, markdown tables and JSON output.

Not part of the library; the scripts next to this file import it as ``common`` (they put their own
directory on ``sys.path``), so ``python benchmarks/<name>.py`` works from any working directory.
"""

from __future__ import annotations

import argparse

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch


# ----- machine ---------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def set_threads(n: int) -> int:
    torch.set_num_threads(n)
    return torch.get_num_threads()


def machine_info() -> dict[str, Any]:
    import transformers

    return {
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "date": _dt.date.today().isoformat(),
        "load_average_at_start": list(os.getloadavg()),
    }


def machine_line(info: dict[str, Any], *, load: bool = True) -> str:
    """The machine, its software and (``load``) the load average the run started and ended at."""
    line = (
        f"{info['cpu']}, {info['logical_cpus']} logical CPUs, torch {info['torch']} "
        f"({info['torch_threads']} thread{'' if info['torch_threads'] == 1 else 's'}), transformers {info['transformers']}, {info['date']}"
    )
    if info.get("gpu"):
        line = f"{info['gpu']} (training), {line}"
    if not load:
        return line
    line += f", 1-min load average at start {info['load_average_at_start'][0]:.2f}"
    if "load_average_at_end" in info:
        line += f", at end {info['load_average_at_end'][0]:.2f}"
    return line


def finish_info(info: dict[str, Any]) -> dict[str, Any]:
    """Add the load average at the end of the run (other jobs on the machine show up here)."""
    info["load_average_at_end"] = list(os.getloadavg())
    return info


# ----- models and inputs ---------------------------------------------------------------------
def bert_base(num_labels: int = 2, seed: int = 0, layers: int = 12):
    """A randomly initialised BERT-base-sized sequence classifier in eval mode (no download);
    ``layers`` < 12 only for smoke tests."""
    return base_classifier("bert", num_labels=num_labels, seed=seed, layers=layers)


def base_classifier(family: str = "bert", num_labels: int = 2, seed: int = 0, layers: int | None = None):
    """A randomly initialised sequence classifier of ``family``'s default (base-sized) config in
    eval mode: ``BertConfig()`` is BERT-base, ``ModernBertConfig()`` ModernBERT-base (22 layers,
    hidden 768, 12 heads, FFN 1152). ``layers`` overrides the depth (smoke tests)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    depth = {"num_hidden_layers": layers} if layers else {}
    torch.manual_seed(seed)
    config = AutoConfig.for_model(family, num_labels=num_labels, **depth)
    return AutoModelForSequenceClassification.from_config(config).eval()


def random_batch(batch_size: int, seq_len: int, *, vocab: int = 30522, num_labels: int = 2, seed: int = 0, labels: bool = True) -> dict[str, torch.Tensor]:
    """Random token ids (ids 1000.. to avoid special tokens), no padding, random labels."""
    g = torch.Generator().manual_seed(seed)
    batch = {
        "input_ids": torch.randint(1000, vocab, (batch_size, seq_len), generator=g),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
    }
    if labels:
        batch["labels"] = torch.randint(0, num_labels, (batch_size,), generator=g)
    return batch


# ----- load from other processes ---------------------------------------------------------------
def cpu_snapshot() -> tuple[float, float, float]:
    """(wall seconds, machine-wide busy CPU seconds, this process's CPU seconds) now (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    busy = (sum(values) - values[3] - values[4]) / ticks
    t = os.times()
    return time.monotonic(), busy, t.user + t.system


def other_cores(start: tuple[float, float, float], end: tuple[float, float, float]) -> float:
    """Average number of cores that *other* processes kept busy between two snapshots."""
    wall = end[0] - start[0]
    if wall <= 0:
        return float("nan")
    return max(0.0, (end[1] - start[1]) - (end[2] - start[2])) / wall


# ----- timing --------------------------------------------------------------------------------
def interleaved(
    variants: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    warmup: int = 1,
    setup: dict[str, Callable[[], Any]] | None = None,
    log: Callable[[str], None] | None = None,
    offset: int = 0,
) -> dict[str, list[float]]:
    """Time every variant once per repetition, round-robin, so machine load hits all alike.

    The starting variant rotates from one repetition to the next (no variant always runs first);
    ``offset`` shifts that rotation (for callers that chain several calls).
    ``setup[name]`` (untimed) runs right before each timed call of ``name``. ``warmup`` full
    rounds run first and are discarded. Returns the seconds of every timed call per variant.
    """
    names = list(variants)
    setup = setup or {}
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + repeats):
        shift = (r + offset) % len(names)
        for name in names[shift:] + names[:shift]:
            if name in setup:
                setup[name]()
            start = time.perf_counter()
            variants[name]()
            elapsed = time.perf_counter() - start
            if r >= warmup:
                times[name].append(elapsed)
            if log is not None:
                tag = "warmup" if r < warmup else f"rep {r - warmup + 1}/{repeats}"
                log(f"  [{tag}] {name}: {elapsed:.3f} s")
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> float:
    """(max - min) / median, a crude indicator of timing noise."""
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else float("nan")


# ----- output --------------------------------------------------------------------------------
def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def write_json(path: str | os.PathLike | None, data: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n")


def stderr_log(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a study's JSON-lines results file (none yet: an empty list)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def in_turns(arms: Sequence[str], rounds: int) -> list[str]:
    """The arms of ``rounds`` rounds, each round starting one arm later: no arm always runs first (after another's
    cache or heat)."""
    return [arm for round_ in range(rounds) for arm in [*arms[round_ % len(arms):], *arms[:round_ % len(arms)]]]


def arms_parser(description: str, *, arms: str, samples: int, results: Path) -> argparse.ArgumentParser:
    """The options of a study whose arms run one command each, in turns, in fresh processes (:func:`arms_in_turns`):
    its work directory, the student, the data, the arms and rounds, and where its report goes."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--arms", default=arms)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=results)
    parser.add_argument("--report-only", action="store_true", help="write the report from WORK/rows.jsonl")
    return parser


def turns_header(title: str, rows: list[dict[str, Any]]) -> list[str]:
    """The first lines of an :func:`arms_in_turns` study's report: its title, the commands, machines and commits of
    its rows, and how they ran."""
    return [f"# {title}", "", "Command: " + ", ".join(f"`{c}`" for c in sorted({r["command"] for r in rows})), "",
            f"Machine: {'; '.join(sorted({r['machine'] for r in rows}))}; torch's default threads (one per logical "
            "CPU), one run at a time, the arms taking turns; 1-minute load average before → after each run in the "
            f"last column. Commit: {', '.join(sorted({r['commit'] for r in rows}))}.", ""]


def arms_in_turns(args: argparse.Namespace, argv: list[str] | None, measure: Callable[[str], dict[str, Any]],
                  report: Callable[[list[dict[str, Any]]], str]) -> str:
    """Run ``args.arms`` for ``args.rounds`` rounds in turns, ``measure(arm)`` a row each, every row a line of
    ``WORK/rows.jsonl`` (a cut-off invocation goes on where it stopped; ``--report-only`` runs nothing) with the
    round, the machine, the commit and the command; the report is written after every row and returned."""
    import shlex
    import subprocess
    import sys

    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    machine = machine_line(machine_info(), load=False)  # the runs' loads are each row's own
    rows_file = args.work / "rows.jsonl"
    rows = read_rows(rows_file)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for k, arm in enumerate(in_turns(args.arms, args.rounds) if not args.report_only else []):
        if k < len(rows):  # measured by an earlier, cut-off invocation
            continue
        row = measure(arm) | {"round": k // len(args.arms), "machine": machine, "commit": commit, "command": command}
        stderr_log(json.dumps(row))
        rows.append(row)
        append_row(rows_file, row)
        args.output.write_text(report(rows))  # after every run: a cut-off run keeps its rows
    text = report(rows)
    args.output.write_text(text)
    return text


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Add one row to a study's results file (appending: a resumed study keeps what it measured)."""
    with open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
