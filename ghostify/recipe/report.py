"""Run reports: per stage parameters, FLOPs, validation metrics and wall time; comparisons of runs
and a plot of metric against FLOPs (like the GhostBERT paper's Figure 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GhostifyError
from ..steps.info import report_size

if TYPE_CHECKING:
    from .run import PlannedStage
    from .schema import Recipe

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def stage_summary(planned: "PlannedStage", wall_time: float) -> dict[str, Any]:
    command = planned.stage.command
    summary: dict[str, Any] = {"stage": planned.label, "command": command.name, "directory": str(planned.directory),
                               "wall_time": round(wall_time, 2), "params": None, "flops": None, "metrics": None}
    if command.produces == "model":
        size = report_size(planned.directory)
        summary.update(params=size["params"], flops=size["flops"])
        training = planned.directory / "training.json"
        if training.is_file():
            run = json.loads(training.read_text())
            evaluations, best = run.get("evaluations") or [], run.get("best_step")
            summary["learning_rates"] = run.get("learning_rates")  # the peak rate of each parameter group
            chosen = [e for e in evaluations if e["step"] == best] or evaluations[-1:]
            if chosen:
                summary["metrics"] = {k: v for k, v in chosen[0]["eval"].items() if k != "samples"}
    elif command.produces == "metrics":
        result = json.loads((planned.directory / "eval.json").read_text())
        summary["metrics"] = result["metrics"]
    return summary


def write_report(run_dir: Path, recipe: "Recipe", rows: list[dict[str, Any]]) -> dict[str, Any]:
    report = {"recipe": recipe.source.filename, "model": recipe.header.model, "stages": rows}
    (run_dir / REPORT_JSON).write_text(json.dumps(report, indent=2))
    (run_dir / REPORT_MD).write_text(markdown([(str(run_dir), report)]))
    return report


def _fmt(value: Any, scale: float, unit: str) -> str:
    return "" if value is None else f"{value / scale:.2f}{unit}"


def markdown(reports: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| run | stage | params | FLOPs | metrics | wall time |", "|---|---|---|---|---|---|"]
    for name, report in reports:
        for row in report["stages"]:
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in (row.get("metrics") or {}).items())
            lines.append(f"| {name} | {row['stage']} | {_fmt(row.get('params'), 1e6, 'M')} | "
                         f"{_fmt(row.get('flops'), 1e9, 'G')} | {metrics} | {row.get('wall_time', 0):.0f}s |")
    return "\n".join(lines) + "\n"


def read_report(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / REPORT_JSON
    if not path.is_file():
        raise GhostifyError(f"no {REPORT_JSON} in {run_dir}: not a `ghostify run` directory (or no stage finished yet)")
    return json.loads(path.read_text())


def final_point(report: dict[str, Any], metric: str | None) -> tuple[float, float, str] | None:
    """(FLOPs, metric value, metric name) of the run's last evaluated stage with a known size."""
    flops = None
    point = None
    for row in report["stages"]:
        flops = row.get("flops") or flops
        metrics = row.get("metrics") or {}
        name = metric or next(iter(metrics), None)
        if flops and name in metrics:
            point = (flops, metrics[name], name)
    return point


def plot(reports: list[tuple[str, dict[str, Any]]], path: str | Path, metric: str | None = None) -> Path:
    """Metric against FLOPs, one point per run (its final evaluation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(name, final_point(report, metric)) for name, report in reports]
    points = [(name, p) for name, p in points if p is not None]
    if not points:
        raise GhostifyError("no run has both FLOPs and a validation metric to plot; run an eval or finetune stage")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, (flops, value, metric_name) in points:
        ax.scatter(flops / 1e9, value)
        ax.annotate(Path(name).name, (flops / 1e9, value), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("FLOPs (G, batch 1, 128 tokens)")
    ax.set_ylabel(points[0][1][2])
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
    return Path(path)
