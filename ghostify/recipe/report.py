"""Run reports: per stage parameters, FLOPs, validation metrics and wall time; comparisons of runs
and a plot of every evaluated model's metric against FLOPs and, where latency was measured,
against latency (like the GhostBERT paper's Figure 1)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..card import read_training
from ..errors import GhostifyError
from ..export.runtime import onnx_path
from ..steps.info import report_size
from ..units import human
from .schema import Recipe, references

if TYPE_CHECKING:
    from .plan import PlannedStage

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
#: latency measurements beside a run: ``ghostify bench ... --json > RUN_DIR/bench.json``
BENCH_GLOB = "bench*.json"
#: what report.md and the plot call a stage whose best evaluation is no better than a constant prediction
NO_BETTER = "no better than a constant prediction"


def runtime_of(model: str | os.PathLike) -> str:
    """"pytorch", "onnx" or "onnx (int8)": what runs ``model`` (as ``ghostify bench`` names it)."""
    graph = onnx_path(model)
    if graph is None:
        return "pytorch"
    return "onnx (int8)" if "int8" in graph.name else "onnx"


def stage_summary(planned: "PlannedStage", wall_time: float) -> dict[str, Any]:
    command = planned.stage.command
    summary: dict[str, Any] = {"stage": planned.label, "command": command.name, "directory": str(planned.directory),
                               "wall_time": round(wall_time, 2), "params": None, "flops": None, "metrics": None}
    if command.produces == "model":
        size = report_size(planned.directory)
        summary.update(params=size["params"], flops=size["flops"])
        run = read_training(planned.directory)
        if run is not None:
            evaluations, best = run.get("evaluations") or [], run.get("best_step")
            summary["learning_rates"] = run.get("learning_rates")  # the peak rate of each parameter group
            chosen = [e for e in evaluations if e.get("step") == best] or evaluations[-1:]
            if chosen:
                summary["metrics"] = {k: v for k, v in chosen[0]["eval"].items() if k != "samples"}
            if run.get("constant_baseline") is not None:
                summary["constant_baseline"] = run["constant_baseline"]
    elif command.produces in ("metrics", "export"):
        model = planned.arguments.get(command.input)
        summary["model"] = str(model)  # what was evaluated or exported: the plot places it
        if command.produces == "metrics":
            result = json.loads((planned.directory / "eval.json").read_text())
            summary["metrics"] = result["metrics"]
            summary["runtime"] = runtime_of(model)
    return summary


def write_report(run_dir: Path, recipe: "Recipe", rows: list[dict[str, Any]]) -> dict[str, Any]:

    teacher = references(recipe.header.teacher or "")
    labels = {row["stage"].split("-", 1)[-1]: row["stage"] for row in rows}
    report = {"recipe": recipe.source.filename, "model": recipe.header.model, "task": recipe.header.data.task,
              "teacher": labels.get(teacher[0]) if teacher else None,
              "left_out": list(getattr(recipe, "left_out", [])), "stages": rows}
    (run_dir / REPORT_JSON).write_text(json.dumps(report, indent=2))
    (run_dir / REPORT_MD).write_text(markdown([(str(run_dir), report)]))
    return report


def _fmt(value: Any, scale: float, unit: str) -> str:
    return "" if value is None else f"{value / scale:.2f}{unit}"


def learned_nothing(row: dict[str, Any]) -> bool:
    baseline = row.get("constant_baseline")
    return isinstance(baseline, dict) and baseline.get("beats") is False


def markdown(reports: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| run | stage | params | FLOPs | metrics | wall time |", "|---|---|---|---|---|---|"]
    notes = []
    for name, report in reports:
        for row in report["stages"]:
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in (row.get("metrics") or {}).items())
            stage = row["stage"]
            if learned_nothing(row):
                baseline = row["constant_baseline"]
                stage += " (!)"
                notes.append(f"(!) {name} {row['stage']}: {NO_BETTER} (best {baseline['metric']} "
                             f"{baseline['best']:.4f}, constant {baseline['value']:.4f}); the stages built on it "
                             "are not meaningful")
            lines.append(f"| {name} | {stage} | {_fmt(row.get('params'), 1e6, 'M')} | "
                         f"{_fmt(row.get('flops'), 1e9, 'G')} | {metrics} | {row.get('wall_time', 0):.0f}s |")
        notes += [f"{name}: stage {label} left out (when: false)" for label in report.get("left_out") or []]
    return "\n".join(lines) + "\n" + "".join(f"\n{note}\n" for note in notes)


def read_report(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / REPORT_JSON
    if not path.is_file():
        raise GhostifyError(f"no {REPORT_JSON} in {run_dir}: not a `ghostify run` directory (or no stage finished yet)")
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------
# the plot
# ----------------------------------------------------------------------------------------------
@dataclass
class Point:
    """One evaluated model of a run: where it sits on the plot and what it is."""

    label: str  # the stage that produced its metric
    kind: str  # "teacher", "stage", "final", "onnx", "onnx (int8)"
    flops: float
    value: float
    model: str  # the checkpoint or graph it measured (to find its latency)
    latency_ms: float | None = None
    learned_nothing: bool = False


#: marker and legend text of each kind of point
KINDS = {"teacher": ("*", "teacher"), "stage": ("o", "stage"), "final": ("s", "final (PyTorch)"),
         "onnx": ("D", "final (ONNX)"), "onnx (int8)": ("^", "final (ONNX int8)")}


def _graph(path: str | os.PathLike) -> Path | None:
    """The ONNX graph ``path`` names (a .onnx file, or an export directory's fp32 graph), without
    requiring it to exist still."""
    path = Path(path)
    if path.suffix == ".onnx":
        return path
    return onnx_path(path) if path.is_dir() else None


def _key(path: str | os.PathLike) -> str:
    """A model's identity for matching: its ONNX graph, else the directory, as an absolute path."""
    graph = _graph(path)
    return os.path.abspath(graph if graph is not None else path)


def _flops_of(model: str, rows: list[dict[str, Any]]) -> float | None:
    """The FLOPs of the checkpoint ``model`` (a stage directory, or an ONNX export of one: the same graph)."""
    by_dir = {os.path.abspath(r["directory"]): r for r in rows}
    graph = _graph(model)
    target = os.path.abspath(graph.parent if graph is not None else model)
    row = by_dir.get(target)
    if row is not None and row.get("command") == "export":
        row = by_dir.get(os.path.abspath(row.get("model") or ""))  # the checkpoint it was exported from
    return row.get("flops") if row is not None else None


def run_points(run_dir: str, report: dict[str, Any], metric: str) -> list[Point]:
    """The teacher, every stage with ``metric`` and the final model in each runtime it was evaluated in."""
    rows = [_moved(row, run_dir) for row in report["stages"]]
    last_model = next((r["stage"] for r in reversed(rows) if r.get("command") not in ("eval", "export")
                       and r.get("flops")), None)
    points = []
    for row in rows:
        value = (row.get("metrics") or {}).get(metric)
        if value is None:
            continue
        if row.get("command") == "eval":
            model = row.get("model")
            if model is None:  # a report of an older ghostify: the last checkpoint before it
                continue
            flops = _flops_of(model, rows)
            runtime = row.get("runtime") or runtime_of(model)
            kind = "final" if runtime == "pytorch" else runtime
        else:
            model, flops = row["directory"], row.get("flops")
            kind = "teacher" if row["stage"] == report.get("teacher") else "stage"
        if flops is None:
            continue
        if kind == "final" and _key(model) != _key(next((r["directory"] for r in rows if r["stage"] == last_model), "")):
            kind = "stage"  # an eval of an earlier checkpoint
        points.append(Point(row["stage"], kind, flops, value, model, learned_nothing=learned_nothing(row)))
    latencies = bench_latencies(run_dir)
    for point in points:
        point.latency_ms = latencies.get(_key(point.model))
    return points


def _moved(row: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """``row`` with the paths inside the run directory it was recorded in moved to ``run_dir``
    (a run copied or moved elsewhere is still matched with its bench results)."""
    recorded = Path(row["directory"]).parent

    def move(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        path = Path(value)
        return str(Path(run_dir) / path.relative_to(recorded)) if path.is_relative_to(recorded) else value

    return {**row, "directory": move(row["directory"]), "model": move(row.get("model"))}


def bench_latencies(run_dir: str | Path) -> dict[str, float]:
    """Median milliseconds per model from the ``ghostify bench --json`` results saved in the run directory."""
    found: dict[str, float] = {}
    for path in sorted(Path(run_dir).glob(BENCH_GLOB)):
        try:
            rows = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise GhostifyError(f"{path} is not the JSON `ghostify bench --json` prints ({exc}); re-run bench or remove it")
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and "model" in row and "median_ms" in row:
                found[_key(row["model"])] = float(row["median_ms"])
    return found


def _metric_of(reports: list[tuple[str, dict[str, Any]]], metric: str | None) -> str:
    if metric is not None:
        return metric
    for _, report in reports:
        for row in report["stages"]:
            if row.get("metrics"):
                return next(iter(row["metrics"]))
    raise GhostifyError("no run has a validation metric to plot; run an eval or finetune stage")


def plot(reports: list[tuple[str, dict[str, Any]]], path: str | Path, metric: str | None = None) -> Path:
    """Metric against FLOPs of every evaluated model of each run (the teacher, each stage with a
    metric, the final model in PyTorch, ONNX and int8 at the FLOPs of its graph) and, when
    latency was measured (``bench*.json`` in the run directory), against latency in a second panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    metric = _metric_of(reports, metric)
    runs = [(name, run_points(name, report, metric)) for name, report in reports]
    if not any(points for _, points in runs):
        raise GhostifyError(f"no run has both FLOPs and a validation {metric} to plot; run an eval or finetune stage "
                            "(or choose another --metric)")
    timed = any(p.latency_ms is not None for _, points in runs for p in points)
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(12 if timed else 7, 4.8), dpi=120, squeeze=False)
    panels = [(axes[0][0], "flops", "FLOPs (batch 1, 128 tokens)")]
    if timed:
        panels.append((axes[0][1], "latency_ms", "latency (ms per forward pass, ghostify bench)"))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, field, xlabel in panels:
        labels = []
        for r, (name, points) in enumerate(runs):
            color = colors[r % len(colors)]
            shown = [p for p in points if getattr(p, field) is not None]
            xs = [getattr(p, field) for p in shown]
            if len(shown) > 1:
                ax.plot(xs, [p.value for p in shown], color=color, alpha=0.3, linewidth=1)
            named: dict[tuple[float, float], list[Point]] = {}  # the models at one place (an eval of the stage before)
            for x, p in zip(xs, shown):
                marker = KINDS[p.kind][0]
                ax.scatter(x, p.value, marker=marker, s=70 if p.kind == "teacher" else 40, color=color, zorder=3)
                if p.learned_nothing:
                    ax.scatter(x, p.value, marker="x", s=120, color="red", zorder=4)
                named.setdefault((x, p.value), []).append(p)
            for (x, value), together in named.items():  # one label a place, naming every stage there
                offset = {"onnx": (4, -10), "onnx (int8)": (4, -20)}.get(together[0].kind, (4, 4))
                labels.append(ax.annotate(", ".join(p.label for p in together), (x, value), textcoords="offset points",
                                          xytext=offset, fontsize=7, color=color if len(runs) > 1 else "black"))
        if field == "flops":  # 22.71M, 1.45G: the tiny test models' FLOPs are thousandths of a G
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: human(value)))
        ax.xaxis.set_major_locator(MaxNLocator(6))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.margins(x=0.08, y=0.12)
        _untangle(fig, ax, labels)
    _legend(axes[0][-1], runs, colors)
    task = next((report.get("task") for _, report in reports if report.get("task")), None)
    where = reports[0][0] if len(reports) == 1 else f"{len(reports)} runs"
    fig.suptitle(f"{where}: {task + ' ' if task else ''}{metric}")
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
    return Path(path)


def _untangle(fig, ax, labels: list[Any]) -> None:
    """Keep the points' labels apart, off the points and on the panel: a label in the right half of the panel
    reads to the left of its point, and one that would cover a point or another label moves below its point,
    a line further each time."""
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    middle = sum(ax.get_xlim()) / 2
    mark = 3.5 * fig.dpi / 72  # half a marker (3.5 points), in pixels: less than a label's offset from its point
    placed = [Bbox.from_bounds(x - mark, y - mark, 2 * mark, 2 * mark)
              for x, y in (ax.transData.transform(label.xy) for label in labels)]
    for label in sorted(labels, key=lambda a: (-a.xy[1], a.xy[0])):
        dx, dy = label.xyann
        if label.xy[0] > middle:
            label.set_horizontalalignment("right")
            label.xyann = (dx := -dx, dy)
        for _ in range(len(labels) + 1):
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
            height = box.height * 72 / fig.dpi  # in points, as the offset
            dy = min(dy, 0) - height - (4 if dy > 0 else 1)  # below the point first, then a line lower
            label.xyann = (dx, dy)
        placed.append(label.get_window_extent(renderer))


def _legend(ax, runs: list[tuple[str, list[Point]]], colors: list[str]) -> None:
    """One entry per kind of point shown, one per run when there are several, and the mark of a
    stage no better than a constant."""
    from matplotlib.lines import Line2D

    kinds = {p.kind for _, points in runs for p in points}
    handles = [Line2D([], [], marker=KINDS[k][0], linestyle="", color="gray", label=KINDS[k][1]) for k in KINDS if k in kinds]
    if len(runs) > 1:
        handles += [Line2D([], [], color=colors[r % len(colors)], label=Path(name).name) for r, (name, _) in enumerate(runs)]
    if any(p.learned_nothing for _, points in runs for p in points):
        handles.append(Line2D([], [], marker="x", linestyle="", color="red", label=NO_BETTER))
    ax.legend(handles=handles, fontsize=7, loc="best")
