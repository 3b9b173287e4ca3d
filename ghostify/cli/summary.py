"""Compact rich tables for the commands' results (info on stdout: it is the answer; the rest on stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from ..methods import describe_all
from .console import err, human, out



def print_importance(scores: Any) -> None:
    """The table of ``ghostify importance``'s scores (``ImportanceScores``: heads and FFN per layer)."""
    meta = scores.metadata
    table = Table(title=f"importance on {meta.get('samples')} {meta.get('split', '')} samples of {meta.get('task', '')}", title_style="bold")
    for column in ("layer", "heads by score", "head score (max / mean)", "FFN score (max / mean)"):
        table.add_column(column)
    for i, (h, f) in enumerate(zip(scores.heads, scores.ffn)):
        order = " ".join(str(j) for j in h.argsort(descending=True).tolist())
        table.add_row(str(i), order, f"{h.max():.3g} / {h.mean():.3g}", f"{f.max():.3g} / {f.mean():.3g}")
    err.print(table)


def print_info(data: dict[str, Any]) -> None:
    table = Table(title=f"{data['model']} ({data['class']})", title_style="bold", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("parameters", f"{human(data['params'])} ({data['params']:,})")
    table.add_row("encoder parameters", f"{human(data['encoder_params'])} (layers, without embeddings)")
    table.add_row("embedding parameters", human(data["embedding_params"]))
    table.add_row("FLOPs", f"{human(data['flops'])} (batch 1, {data['seq_len']} tokens, no embedding lookup)")
    for what, value in describe_all(data):  # each structural method says what it did
        table.add_row(what, value)
    for step in data["history"]:
        changed = _changed(step.get("command", ""), step.get("arguments") or {})
        args = ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"
        table.add_row(f"history: {step['command']}", f"{step.get('time', '')}  {args}")
    if data["history"]:
        table.caption = ("history: the settings that differ from the defaults (every setting, and what each step "
                         "measured: --json)")
    out.print(table)


def _changed(command: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a history step that are settings of ``command`` other than their defaults (the
    model it read is the row above). What a step measured (a prune's predicted milliseconds, its tuning)
    stays for ``--json``, and the method's own rows say it; a command the registry does not know (a
    plug-in not installed now) shows every argument that is one value."""
    from ..flatten import EMPTY, flat_parameters
    from ..recipe.schema import commands

    known = commands().get(command)
    if known is None:
        return {k: v for k, v in arguments.items() if k != "model" and not isinstance(v, (dict, list))}
    defaults = {p.name: p.default for p in flat_parameters(known.function)}
    return {k: v for k, v in arguments.items() if k in defaults and k != "model"
            and (defaults[k] is EMPTY or v != _as_recorded(defaults[k]))}


def _as_recorded(value: Any) -> Any:
    """A default as a history records it (JSON: tuples as lists, paths as text)."""
    return json.loads(json.dumps(value, default=str))


def print_training(result) -> None:
    best = "" if result.best is None else f", best {result.best:.4f}"
    rates = result.learning_rates  # shown when the ghost kernels had a rate of their own
    shown = f" ({', '.join(f'{k} {v:g}' for k, v in rates.items())})" if "ghost_lr" in rates else ""
    # always said: a launch that silently ran one process shows it here
    processes = f"{result.processes} process{'es' if result.processes != 1 else ''}"
    err.print(f"{result.steps} steps in {result.wall_time:.0f}s, trained on {processes}{best}{shown}")
    for record in result.metrics:
        values = "  ".join(f"{k} {v:.4f}" for k, v in record["eval"].items() if k != "samples")
        err.print(f"  epoch {record['epoch']} (step {record['step']}): {values}")


def print_written(output, *contents: str) -> None:
    """The last line of a command: where its outputs are (and what of them to look at)."""
    listed = [name for name in contents if (Path(output) / name).exists()]
    err.print(f"wrote {output}" + (f" ({', '.join(listed)})" if listed else ""), markup=False)


def print_trained(output) -> None:
    """The last line of a training command: the checkpoint, its logs and its record."""
    print_written(output, "metrics.jsonl", "training.json", "runs/")
