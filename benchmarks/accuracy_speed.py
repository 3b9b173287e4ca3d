"""The picture the docs open with: accuracy against measured speed-up, the compressed models as a frontier and the
dense model in each runtime as points.

The frontier is ``compress``'s (``benchmarks/results/frontier.md``: the shipped int8 models' validation score at
the speed-up measured against the teacher in ONNX Runtime int8); the points are the same teacher in each runtime
(``benchmarks/results/runtimes.json``, written by ``benchmarks/runtimes.py --accuracy``: its score in each runtime,
its speed at the speed-up against the teacher in ONNX Runtime int8 timed in the same run). Both sets of
speed-ups are against the teacher in ONNX Runtime int8 (batch 1 x 128, one thread, CPU time), each on the
machine its file names.

    python benchmarks/accuracy_speed.py           # writes benchmarks/results/accuracy_speed.png
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: a frontier cell: "84.5 (-2.5) @1.81x"
_CELL = re.compile(r"^\s*([\d.]+) \([+-][\d.]+\) @([\d.]+)x\s*$")


def frontier(path: Path, task: str, budget: str, arm: str) -> list[tuple[float, float]]:
    """(measured speed-up, score) of ``arm``'s column in ``task``'s table of ``budget``'s section of frontier.md."""
    section = path.read_text().split(f"## Budget `{budget}`", 1)
    if len(section) < 2:
        return []
    body = section[1].split("\n## ", 1)[0]
    found = body.split(f"### {task} ", 1)
    if len(found) < 2:
        return []
    lines = [line for line in found[1].split("\n### ", 1)[0].splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    if arm not in header:
        return []
    column = header.index(arm)
    points = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].endswith("x") or not cells[0][:-1].isdigit():
            break  # the FLOP table below
        match = _CELL.match(cells[column])
        if match:
            points.append((float(match.group(2)), float(match.group(1))))
    return sorted(points)


def dense_points(path: Path) -> tuple[list[tuple[str, float, float]], dict]:
    """(runtime, speed-up against ONNX Runtime int8, score in points) of the teacher in each runtime (the default
    graph of each: no forced precision, no extra int8 variant), and the file's data."""
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if r["metrics"] and "int8-" not in r["file"]]
    reference = next(r for r in rows if r["name"].startswith("ONNX Runtime int8"))
    metric = next(iter(reference["metrics"]))
    return [(r["name"].split(" (")[0], reference["cpu_ms"] / r["cpu_ms"], 100 * r["metrics"][metric])
            for r in rows], data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="sst2")
    p.add_argument("--frontier", type=Path, default=RESULTS / "frontier.md")
    p.add_argument("--runtimes", type=Path, default=RESULTS / "runtimes.json")
    p.add_argument("--output", type=Path, default=RESULTS / "accuracy_speed.png")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dense, data = dense_points(args.runtimes)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for budget, style in (("quick", "o--"), ("standard", "s-")):
        points = frontier(args.frontier, args.task, budget, "all")
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, style, color="tab:purple" if budget == "quick" else "tab:green",
                    label=f"ghostify compress --budget {budget}")
            for x, y in points:
                ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    markers = {"PyTorch": "v", "ONNX Runtime": "D", "OpenVINO": "^"}
    for i, (name, x, y) in enumerate(sorted(dense, key=lambda d: d[1])):
        runtime = next((k for k in markers if name.startswith(k)), "")
        int8 = "int8" in name
        ax.scatter([x], [y], marker=markers.get(runtime, "o"), s=55, zorder=3, edgecolors="black",
                   color="tab:gray" if int8 else "white",
                   label="dense model in a runtime (filled: int8)" if i == 0 else None)
        # the points sit close together: their names go in a column below them, each with a line to its point
        ax.annotate(f"{name}: {y:.1f}", (x, y), textcoords="offset points", xytext=(12, -16 * (i + 1)), fontsize=7,
                    va="center", arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.6})
    ax.set_xlabel("measured speed-up over the dense model in ONNX Runtime int8\n"
                  f"(batch {data['batch_size']} x {data['seq_len']}, {data['threads']} thread, CPU time)")
    ax.set_ylabel(f"{args.task} validation accuracy (%)")
    ax.set_xscale("log", base=2)
    ticks = [t for t in (0.25, 0.5, 1, 2, 4, 6) if min(x for _, x, _ in dense) / 1.5 <= t]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
