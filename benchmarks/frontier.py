"""The speed-accuracy frontier of ``ghostify compress`` on MiniLM (issue 38): accuracy against the measured ONNX
Runtime int8 speed-up (batch 1 x 128 tokens, 1 thread) at 2x, 3x, 4x and 6x, for each set of allocation axes.

For each task, the teacher is all-MiniLM-L6-v2 fine-tuned by ``benchmarks/retraining_free.py`` (the same recipe
and directory: ``--work`` is shared with it, so it is trained once). Every arm starts from it, at the ``standard``
budget (``ghostify compress``'s, 8,000 examples and 2 epochs of distillation and of fine-tuning with the teacher):

* ``uniform``: ``prune --width k/96``, the widest uniform width whose predicted latency meets the target, then the
  same distill and fine-tune stages as compress (the chain of ``recipes/compress.yaml`` with a width);
* ``heads+neurons``: ``compress --no-prune-hidden`` (the axes before issue 38);
* ``+layers``: ``compress --drop-layers --no-prune-hidden``;
* ``+hidden``: ``compress --prune-hidden``;
* ``all``: ``compress --prune-hidden --drop-layers`` (heads, neurons, residual channels and whole layers);
* ``all+ghosts`` (``--ghost-seeds``): ``all`` with ``--ghosts``, paired over seeds with ``all`` at the same seeds,
  at the targets where ``all`` loses at least 2 points.

A target an arm cannot reach is recorded as such (compress refuses it before any stage runs). Each arm's shipped
int8 model is scored on the validation split by compress itself; the speed-up is compress's own final
measurement against the teacher's int8 graph (models taking turns, median CPU time); the uniform chain's is
``ghostify bench`` of the same two graphs. Every finished row is appended to ``WORK/frontier.jsonl`` and skipped
when the script runs again with the same ``--work``; an interrupted compress resumes its stages.

    python benchmarks/frontier.py --work /work/runs/rf --tasks sst2                       # one task, every arm
    python benchmarks/frontier.py --work /work/runs/rf --tasks sst2 --targets 3 --arms all,uniform
    python benchmarks/frontier.py --work /work/runs/rf --report-only                      # table and figure
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import retraining_free as rf  # noqa: E402  the tasks, their teachers and data

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "frontier.md"
FIGURE = REPO / "benchmarks" / "results" / "frontier.png"
ROWS = "frontier.jsonl"
#: compress's axes per arm: (--drop-layers, --prune-hidden)
AXES = {"heads+neurons": (False, False), "+layers": (True, False), "+hidden": (False, True), "all": (True, True)}
ARMS = ("uniform", *AXES)
TASKS = ("sst2", "conll2003", "squad")
#: a compressed model that keeps this many points fewer than its teacher gets the ghost arm
GHOST_POINTS = 2.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="the work directory of benchmarks/retraining_free.py")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--targets", default="2,3,4,6")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--budget", default="standard")
    p.add_argument("--ghost-seeds", default="", help="seeds of the ghost arm (and of `all` beside it), e.g. 0,1,2")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--minilm", type=Path, default=rf.SHARED / "models" / "all-MiniLM-L6-v2")
    p.add_argument("--data", type=Path, default=rf.SHARED / "data")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--figure", type=Path, default=FIGURE)
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.targets = [float(t) for t in args.targets.split(",") if t]
    args.arms = [a for a in args.arms.split(",") if a]
    args.ghost_seeds = [int(s) for s in args.ghost_seeds.split(",") if s]
    for arm in args.arms:
        if arm not in ARMS:
            p.error(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    return args


def settings(name: str, root: Path):
    from ghostify.settings import DataSettings, TaskSettings

    data = rf.TASKS[name].data_for(root)
    task_keys = set(TaskSettings.__dataclass_fields__)
    return (DataSettings(**{k: v for k, v in data.items() if k not in task_keys}),
            TaskSettings(**{k: v for k, v in data.items() if k in task_keys}))


def run_compress(args, name: str, teacher: Path, target: float, arm: str, seed: int, ghosts: bool) -> dict[str, Any]:
    from ghostify.errors import GhostifyError
    from ghostify.latency_model import Deployment
    from ghostify.recipe.compress import compress

    layers, hidden = AXES[arm.removesuffix("+ghosts") if arm.endswith("+ghosts") else arm]
    data, task = settings(name, args.data)
    out = args.work / name / "frontier" / f"{args.budget}-x{target:g}-{arm}-s{seed}"
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = compress(teacher, out, speedup=target, budget=args.budget, data=data, task_settings=task,
                              drop_layers=layers, prune_hidden=hidden, ghosts=ghosts, seed=seed, rounds=args.rounds,
                              deployment=Deployment(runtime="onnx-int8"),  # the runtime its rows were measured in
                              say=common.stderr_log)
    except GhostifyError as exc:
        return {"refused": str(exc)}
    return {"metrics": report["metrics"], "shipped_metrics": report.get("shipped_metrics"),
            "measured_speedup": report["measured_speedup"], "flops": report["flops"], "params": report["params"],
            "heads": report["heads_per_layer"], "ffn": report["neurons_per_layer"], "layers": report["layers"],
            "hidden": _hidden(Path(report["model_dir"])), "choice": report.get("choice"),
            "tune_masks": report["budget_settings"]["tune_masks"],
            "seconds": time.perf_counter() - start, "load": list(os.getloadavg())}


def _hidden(model: Path) -> int:
    return int(json.loads((model / "config.json").read_text())["hidden_size"])


def run_uniform(args, name: str, teacher: Path, target: float, seed: int) -> dict[str, Any]:
    """``prune --width`` to the widest uniform width within the target, then compress's training stages at the budget."""
    from ghostify import steps
    from ghostify.latency_model import LatencyModel
    from ghostify.methods.pruning import uniform_width
    from ghostify.settings import BUDGETS

    latency = steps.latency(teacher, runtime="onnx-int8", batch_size=1, seq_len=128, threads=1)
    width = uniform_width(latency, latency.dense_ms() / target)
    if width is None:
        return {"refused": f"no uniform width keeps a head per layer within {target:g}x"}
    budget = BUDGETS[args.budget]
    spec = rf.TASKS[name]
    base = args.work / name / "frontier"
    base.mkdir(parents=True, exist_ok=True)
    train = {"max_samples": budget.max_samples, "epochs": budget.epochs}
    scored = args.work / name / "scored"  # retraining_free.py's importance of the teacher
    raw = {"description": f"frontier uniform {name} {target:g}x, budget {args.budget}", "model": str(scored), "teacher": str(teacher),
           "data": spec.data_for(args.data), "seed": seed, "stages": [
               {"prune": {"width": str(width), **({"tune_masks": budget.tune_masks} if budget.tune_masks else {})}},
               {"distill": {**train, "learning_rate": budget.distill_learning_rate}},
               {"finetune": {"output": "final", "teacher": str(teacher), "teacher_weight": budget.teacher_weight,
                             **train, "learning_rate": budget.finetune_learning_rate}},
               {"eval": {"output": "final-eval"}},
               {"export": {"output": "onnx", "format": "onnx", "quantize": "int8"}},
               {"eval": {"output": "shipped-eval", "model": "${onnx}/model_int8.onnx"}}]}
    run_dir = base / f"{args.budget}-x{target:g}-uniform-s{seed}"
    start = time.perf_counter()
    rf.run_recipe(raw, base / f"{args.budget}-x{target:g}-uniform-s{seed}.yaml", run_dir)
    dense = rf.export_int8(teacher, args.work / name / "teacher-int8")
    graph = run_dir / "05-onnx" / "model_int8.onnx"
    rows = steps.bench([dense, str(graph)], batch_size=1, seq_len=128, threads=1, rounds=args.rounds)
    from ghostify.steps.info import report_size

    size_teacher, size = report_size(teacher, 128), report_size(run_dir / "03-final", 128)
    return {"metrics": json.loads((run_dir / "04-final-eval" / "eval.json").read_text())["metrics"],
            "shipped_metrics": json.loads((run_dir / "06-shipped-eval" / "eval.json").read_text())["metrics"],
            "measured_speedup": rows[0]["cpu_median_ms"] / rows[1]["cpu_median_ms"], "width": str(width),
            "flops": {"teacher": size_teacher["flops"], "compressed": size["flops"]},
            "params": {"teacher": size_teacher["params"], "compressed": size["params"]}, "tune_masks": budget.tune_masks,
            "seconds": time.perf_counter() - start, "load": list(os.getloadavg())}


def find(rows, **keys):
    return next((r for r in rows if all(r.get(k) == v for k, v in keys.items())), None)


def teacher_score(args, name: str) -> float:
    rows = common.read_rows(args.work / rf.ROWS)
    return rf.score(rf.find(rows, task=name, arm="teacher"), name)


def run(args) -> None:
    rows = common.read_rows(args.work / ROWS)
    tasks_rows = common.read_rows(args.work / rf.ROWS)
    for name in args.tasks:
        teacher = rf.teacher(args_for_rf(args), name, tasks_rows)
        rf.scored(args_for_rf(args), name, teacher, tasks_rows)
        for target in args.targets:
            for arm in args.arms:
                if find(rows, task=name, target=target, arm=arm, seed=0, budget=args.budget) is not None:
                    continue
                common.stderr_log(f"== {name} {target:g}x {arm}")
                result = run_uniform(args, name, teacher, target, 0) if arm == "uniform" else \
                    run_compress(args, name, teacher, target, arm, 0, ghosts=False)
                row = {"task": name, "target": target, "arm": arm, "seed": 0, "budget": args.budget, **result}
                common.append_row(args.work / ROWS, row)
                rows.append(row)
            ghost_points(args, name, teacher, target, rows)


def ghost_points(args, name: str, teacher: Path, target: float, rows: list[dict[str, Any]]) -> None:
    """The ghost arm beside ``all`` over ``--ghost-seeds``, where ``all`` loses at least GHOST_POINTS."""
    if not args.ghost_seeds:
        return
    base = find(rows, task=name, target=target, arm="all", seed=0, budget=args.budget)
    if base is None or "refused" in base:
        return
    loss = teacher_score(args, name) - rf.score(base, name)
    if loss < GHOST_POINTS:
        return
    for seed in args.ghost_seeds:
        for arm, ghosts in (("all", False), ("all+ghosts", True)):
            if find(rows, task=name, target=target, arm=arm, seed=seed, budget=args.budget) is not None:
                continue
            common.stderr_log(f"== {name} {target:g}x {arm} seed {seed}")
            result = run_compress(args, name, teacher, target, arm, seed, ghosts=ghosts)
            row = {"task": name, "target": target, "arm": arm, "seed": seed, "budget": args.budget, **result}
            common.append_row(args.work / ROWS, row)
            rows.append(row)


def args_for_rf(args) -> argparse.Namespace:
    """What retraining_free.py's teacher and importance steps read of the arguments."""
    return argparse.Namespace(work=args.work, minilm=args.minilm, data=args.data, importance_samples=2048)


# ----- report -------------------------------------------------------------------------------------
def report(args, rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = ["# The speed-accuracy frontier (issue 38)", "",
             f"Command: `python benchmarks/frontier.py --work {args.work} --budget BUDGET` (one run per budget below)", "",
             f"Machine: {common.machine_line(info)}", "",
             "all-MiniLM-L6-v2 fine-tuned per task (the teacher of benchmarks/results/retraining_free.md), compressed "
             "at a budget to each target speed-up of ONNX Runtime int8 (batch 1 x 128 tokens, 1 thread) with each set "
             "of allocation axes; `uniform` is `prune --width` through the same training. Each cell: the shipped int8 "
             "model's validation score (points against the teacher) @ the measured speed-up (median CPU time, models "
             "taking turns against the teacher's int8 graph). Seed 0.", ""]
    for budget in sorted({budget_of(r) for r in rows}, key=lambda b: (b != "standard", b)):
        lines += [f"## Budget `{budget}`", ""]
        lines += budget_section(args, [r for r in rows if budget_of(r) == budget])
    return "\n".join(lines) + "\n"


def budget_of(row: dict[str, Any]) -> str:
    return row.get("budget", "standard")


def budget_section(args, rows: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    loads = [r["load"][0] for r in rows if r.get("load")]
    if loads:
        lines += [f"Each row one thread per process, beside other jobs (1-min load average {min(loads):.1f}-"
                  f"{max(loads):.1f} as the rows finished)."]
    if any("tune_masks" not in r for r in rows if "refused" not in r):
        lines += ["Rows without a recorded `tune_masks` ran before this budget tuned the pruned model (mask "
                  "tuning on 2,048 examples joined the quick and standard budgets after them): prune, then training."]
    lines += [""] if len(lines) else []
    names = [n for n in TASKS if any(r["task"] == n for r in rows)]
    for name in names:
        t = teacher_score(args, name)
        table = []
        for target in sorted({r["target"] for r in rows if r["task"] == name}):
            cells = []
            for arm in ARMS:
                r = find(rows, task=name, target=target, arm=arm, seed=0)
                if r is None:
                    cells.append("-")
                elif "refused" in r:
                    cells.append("out of reach")
                else:
                    s = shipped_score(r, name)
                    cells.append(f"{s:.1f} ({s - t:+.1f}) @{r['measured_speedup']:.2f}x")
            table.append([f"{target:g}x", *cells])
        lines += [f"### {name} (teacher {t:.1f})", "", common.markdown_table(["target", *ARMS], table), ""]
        flops = []
        for r in rows:
            if r["task"] == name and r.get("seed") == 0 and "refused" not in r and r["arm"] in ARMS:
                ratio = r["flops"]["teacher"] / r["flops"]["compressed"]
                flops.append([f"{r['target']:g}x", r["arm"], f"{ratio:.2f}x", f"{r['measured_speedup']:.2f}x",
                              f"{r['measured_speedup'] / ratio:.2f}", r.get("hidden", "-")])
        if flops:
            lines += ["FLOPs against milliseconds (FLOP ratio: the teacher's FLOPs over the compressed model's; the "
                      "closer the measured speed-up to it, the less time goes to what pruning does not shrink):", "",
                      common.markdown_table(["target", "arm", "FLOP ratio", "measured speed-up",
                                             "speed-up / FLOP ratio", "hidden size"], sorted(flops)), ""]
    ghosts = [r for r in rows if r["arm"] == "all+ghosts"]
    if ghosts:
        lines += ["### Ghost modules where compression loses accuracy", "",
                  "Paired over seeds with `all` at the same target and seed: mean and Student-t 95% interval of "
                  "`all+ghosts` - `all` in points.", ""]
        gt = []
        for name, target in sorted({(r["task"], r["target"]) for r in ghosts}):
            pairs = [(find(rows, task=name, target=target, arm="all", seed=r["seed"]), r) for r in ghosts
                     if r["task"] == name and r["target"] == target]
            pairs = [(a, g) for a, g in pairs if a is not None and "refused" not in a and "refused" not in g]
            diffs = [shipped_score(g, name) - shipped_score(a, name) for a, g in pairs]
            if diffs:
                mean, low, high = rf.t_interval(diffs)
                speed = [", ".join(f"{p[i]['measured_speedup']:.2f}x" for p in pairs) for i in (0, 1)]
                gt.append([name, f"{target:g}x", len(diffs), f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]", *speed])
        lines += [common.markdown_table(["task", "target", "seeds", "ghosts - all (points)", "all: measured",
                                         "all+ghosts: measured"], gt), ""]
    return lines


def shipped_score(row: dict[str, Any], name: str) -> float:
    metrics = row.get("shipped_metrics") or row["metrics"]
    return metrics[rf.TASKS[name].metric] * rf.TASKS[name].points


def figure(args, rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in TASKS if any(r["task"] == n for r in rows)]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        t = teacher_score(args, name)
        ax.axhline(t, color="black", linestyle="--", linewidth=1, label=f"teacher {t:.1f}")
        for budget in sorted({budget_of(r) for r in rows}):
            for arm in ARMS:
                points = sorted((r["measured_speedup"], shipped_score(r, name)) for r in rows
                                if r["task"] == name and r["arm"] == arm and r.get("seed") == 0 and "refused" not in r
                                and budget_of(r) == budget)
                if points:
                    ax.plot(*zip(*points), marker="o", label=f"{arm} ({budget})",
                            linestyle="-" if budget == "standard" else "--")
        ax.set_xlabel("measured int8 speed-up over the teacher\n(ONNX Runtime, batch 1 x 128, 1 thread)")
        ax.set_ylabel(f"{rf.TASKS[name].metric} (validation, int8)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    args = parse_args(argv)
    info = common.machine_info()
    if not args.report_only:
        run(args)
    common.finish_info(info)
    rows = common.read_rows(args.work / ROWS)
    text = report(args, rows, info)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    figure(args, rows, args.figure)
    print(text)


if __name__ == "__main__":
    main()
