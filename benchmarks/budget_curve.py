"""Accuracy against wall-clock minutes (issue 46): ``ghostify compress`` at 3x and 6x on this machine, today's
one-shot schedule against everything issue 46 changed, and each change alone at one budget.

Every arm starts from the same teacher, all-MiniLM-L6-v2 fine-tuned per task by ``benchmarks/retraining_free.py``
(``--work`` is shared with it: the teachers are trained once), and ships in ONNX Runtime int8 (the ``openvino-int8``
arm: OpenVINO int8; batch 1 x 128 tokens, 1 thread), measured by compress itself. Each run is its own process with
torch's default threads (every core of the machine), one run at a time: a budget in minutes is the machine's, so
nothing else may run beside it.

Arms (``--arms``):

* ``today``: the code before issue 46 (``--today``: a checkout of commit 5a6b1cc), its one-shot schedule at the
  budget named in ``--today-budgets`` (``quick``: 2,000 examples x 1 epoch of distillation and of the fine-tune;
  ``standard``: 8,000 x 2); its minutes are what the run took;
* ``all``: this checkout with ``--budget Nm`` (every change: the teacher's outputs stored, the stages the target
  calls for, the whole training text distilled, the layer-consistent allocation, candidates judged by the task's
  metric, the stages sized to the time, the last epoch cut to fill it);
* ``one-stage`` (``--stages 1``), ``two-stages`` (``--stages 2``), ``no-store`` (``--teacher-store-gb 0``),
  ``old-allocation`` (the units of a layer priced alone, as before), ``fp32`` (``--mixed-precision no``: the same
  as ``all`` on a CPU without bf16 instructions), ``keep-layers`` (``--no-drop-layers``: every layer kept,
  thinner), ``openvino-int8`` (``--runtime openvino-int8``: compressed for, timed in and shipped in OpenVINO int8,
  against the dense model there), ``auto`` (``--runtime auto``, compress's default since the runtime it ships in is
  the fastest one here; every other arm ships in ONNX Runtime int8, the default its rows were measured with):
  ``all`` with one setting changed, at ``--ablation-minutes``.
  The ``two-stages`` rows at 3x were the ``all`` arm while two stages were the default past 2x (before d2690fd),
  and every row before b87e1b2 trained whole epochs only (the ``one-stage`` rows at 3x are today's default without
  the cut last epoch); CoNLL-2003's ``two-stages`` row at 6x was the ``all`` arm before
  8e52ace, which plans the fine-tune again after the last distillation. The SQuAD part's rows before 4086c45
  distilled the hidden states at the standard budget's learning rates and scored on 1,024 and 2,048 windows (its
  ``one-stage`` 20-minute row is that ``all`` arm with one stage, its default then too). Rows before e88e8c6 broke a
  tie of the candidates' metric by the distance alone, where the run trains too; rows before the standard error
  read the SQuAD F1 in percent (see ``MetricScores``) kept the candidate of the best F1 alone: the SQuAD part's
  ``argmax-f1`` row is the ``all`` arm of d39745f, relabelled.
* ``none-1`` to ``none-4``: ``--budget none`` (no training: scores, pruning and mask tuning) in that many stages.

The report pairs every arm with ``today`` over the seeds both ran (``--seeds 0,1,2``): the mean difference of the
shipped score and its Student-t 95% interval.

Every finished run is a row of ``WORK/budget_curve.jsonl`` (skipped when the script runs again); an interrupted
compress resumes its stages.

    python benchmarks/budget_curve.py --work /work/runs/rf --tasks sst2 --targets 6 --minutes 20 --arms all,today
    python benchmarks/budget_curve.py --work /work/runs/rf --tasks sst2 --targets 1.5,2 --arms none-1,none-3
    python benchmarks/budget_curve.py --work /work/runs/rf --report-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import retraining_free as rf  # noqa: E402  the tasks, their teachers and data

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "budget_curve.md"
ROWS = "budget_curve.jsonl"
#: the arms that are ``all`` less one change, and the compress flags that take it away
ABLATIONS = {"one-stage": ["--stages", "1"], "two-stages": ["--stages", "2"], "no-store": ["--teacher-store-gb", "0"],
             "old-allocation": [], "fp32": ["--mixed-precision", "no"], "keep-layers": ["--no-drop-layers"],
             "openvino-int8": ["--runtime", "openvino-int8"], "auto": ["--runtime", "auto"]}
#: every arm ships in ONNX Runtime int8 (compress's default until it picked the fastest runtime), unless it names
#: its own runtime or ``--runtime`` names another (a machine whose quantiser fails: ``onnx``)
PINNED_RUNTIME = "onnx-int8"
#: ``--budget none`` (no training) in 1 to 4 stages: K-prune's iterative search (score, prune a little, tune the
#: masks, score again) against one shot
NO_TRAINING = {f"none-{k}": ["--stages", str(k)] for k in (1, 2, 3, 4)}
ARMS = ("all", "today", *ABLATIONS, *NO_TRAINING)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="the work directory of benchmarks/retraining_free.py")
    p.add_argument("--tasks", default="sst2,conll2003")
    p.add_argument("--targets", default="3,6")
    p.add_argument("--minutes", default="20", help="budgets of the `all` arm, e.g. 10,20,40")
    p.add_argument("--arms", default="all,today")
    p.add_argument("--ablation-minutes", type=float, default=20)
    p.add_argument("--today", type=Path, default=Path("/work/wt-today"), help="a checkout of the code before issue 46")
    p.add_argument("--today-budgets", default="standard")
    p.add_argument("--seeds", default="0")
    p.add_argument("--data", type=Path, default=rf.SHARED / "data")
    p.add_argument("--runtime", default=PINNED_RUNTIME, help="the runtime every arm ships in, unless it names its own")
    p.add_argument("--minilm", type=Path, default=rf.SHARED / "models" / "all-MiniLM-L6-v2",
                   help="the model a task's teacher is fine-tuned from where --work has none yet")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--old-allocation", action="store_true", help=argparse.SUPPRESS)  # the ablation's own process
    args, rest = p.parse_known_args(argv)
    args.rest = rest
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.targets = [float(t) for t in args.targets.split(",") if t]
    args.minutes = [float(m) for m in args.minutes.split(",") if m]
    args.arms = [a for a in args.arms.split(",") if a]
    args.today_budgets = [b for b in args.today_budgets.split(",") if b]
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    for arm in args.arms:
        if arm not in ARMS:
            p.error(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    return args


def compress_args(args, name: str, target: float, out: Path, budget: str, seed: int) -> list[str]:
    spec = rf.TASKS[name]
    data = spec.data_for(args.data)
    flags = ["--task", data["task"], "--dataset", data["dataset"], "--max-length", str(data["max_length"])]
    for key in ("tags_column", "tag_scheme", "doc_stride"):
        if key in data:
            flags += [f"--{key.replace('_', '-')}", str(data[key])]
    teacher = args.work / name / "run" / "01-teacher"
    return [str(teacher), "-o", str(out), "--speedup", f"{target:g}", "--budget", budget, "--seed", str(seed), *flags]


def run_one(args, name: str, target: float, arm: str, budget: str, seed: int) -> dict[str, Any]:
    out = args.work / name / "budget" / f"{arm}-{budget}-x{target:g}-s{seed}"
    argv = ["compress", *compress_args(args, name, target, out, budget, seed), "--runtime", args.runtime,
            *ABLATIONS.get(arm, []), *NO_TRAINING.get(arm, [])]  # an arm's own --runtime comes last, and wins
    env = dict(os.environ)
    if arm == "today":
        # the code before issue 46, ahead of this checkout's install (and of any packages the path already names)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(args.today), env.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-m", "ghostify", *argv]
    elif arm == "old-allocation":
        command = [sys.executable, __file__, "--old-allocation", "--work", str(args.work), *argv]
    else:
        command = [sys.executable, "-m", "ghostify", *argv]
    common.stderr_log(" ".join(command))
    start, load = time.perf_counter(), os.getloadavg()
    # the today checkout's own directory first on the path (a run from this checkout would import it instead)
    done = subprocess.run(command, env=env, cwd=str(args.today) if arm == "today" else None)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        return {"failed": done.returncode, "seconds": seconds}
    report = json.loads((out / "report.json").read_text())
    return {"metrics": report["metrics"], "shipped_metrics": report.get("shipped_metrics"),
            "teacher_metrics": report["teacher_metrics"], "measured_speedup": report["measured_speedup"],
            "heads": report["heads_per_layer"], "ffn": report["neurons_per_layer"], "layers": report["layers"],
            "stages": report.get("compression_stages"), "training": report.get("training"),
            "choice": report.get("choice"), "precision": report.get("precision"),
            "time": report.get("time"), "seconds": seconds, "load_start": list(load),
            "load_end": list(os.getloadavg())}


def old_allocation_main(rest: list[str]) -> int:
    """This process as ``ghostify`` with the units of a layer priced alone (the allocation before issue 46)."""
    import ghostify.methods.pruning.apply as apply
    import ghostify.steps.latency_plan as plan
    from ghostify.cli.app import main

    def alone(heads, ffn, layers):
        return list(heads), list(ffn)

    apply.layer_consistent = alone
    plan.layer_consistent = alone
    return main(rest)


def runs(args) -> list[tuple[str, float, str, str, int]]:
    """(task, target, arm, budget, seed) of every run asked for."""
    grid = []
    for name in args.tasks:
        for target in args.targets:
            for seed in args.seeds:
                if "today" in args.arms:
                    grid += [(name, target, "today", b, seed) for b in args.today_budgets]
                if "all" in args.arms:
                    grid += [(name, target, "all", f"{m:g}m", seed) for m in args.minutes]
                grid += [(name, target, arm, f"{args.ablation_minutes:g}m", seed) for arm in args.arms
                         if arm in ABLATIONS]
                grid += [(name, target, arm, "none", seed) for arm in args.arms if arm in NO_TRAINING]
    return grid


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.old_allocation:
        sys.exit(old_allocation_main(args.rest))
    path = args.work / ROWS
    rows = common.read_rows(path)
    if not args.report_only:
        for name in args.tasks:  # a teacher missing from --work: trained as benchmarks/retraining_free.py does
            if not (args.work / name / "run" / "01-teacher").is_dir():
                rf.teacher(args, name, common.read_rows(args.work / rf.ROWS))
        for name, target, arm, budget, seed in runs(args):
            key = {"task": name, "target": target, "arm": arm, "budget": budget, "seed": seed}
            if any(all(r.get(k) == v for k, v in key.items()) for r in rows):
                continue
            row = {**key, **run_one(args, name, target, arm, budget, seed), "machine": common.machine_info()}
            common.append_row(path, row)
            rows.append(row)
    write_report(args, rows)


def _arm_order(arm: str) -> int:
    """Where an arm's rows go in the report: in ARMS' order, relabelled rows of an earlier code last."""
    return ARMS.index(arm) if arm in ARMS else len(ARMS)


def _score(row: dict[str, Any], name: str) -> str:
    if "failed" in row:
        return f"failed ({row['failed']})"
    metric = rf.TASKS[name].metric
    points = rf.TASKS[name].points
    shipped = row.get("shipped_metrics") or row["metrics"]
    value, teacher = shipped.get(metric), row["teacher_metrics"].get(metric)
    kept = f" ({100 * value / teacher:.1f}%)" if value is not None and teacher else ""
    chosen = (row.get("choice") or {}).get("chosen")
    precision = {"no": "fp32"}.get(row.get("precision"), row.get("precision"))
    extra = "".join(f", {x}" for x in (chosen, precision) if x)  # rows before e88e8c6 name neither
    return f"{points * value:.1f}{kept} @{row['measured_speedup']:.2f}x, {row['seconds'] / 60:.1f} min{extra}"


def _paired(name: str, rows: list[dict[str, Any]]) -> list[str]:
    """Each arm against ``today`` over the seeds both ran (at one target and budget each): the mean difference of
    the shipped score in points with its Student-t 95% interval, and the mean speed-ups; where two seeds or more
    pair up."""
    spec = rf.TASKS[name]

    def score(row: dict[str, Any]) -> float:
        return spec.points * (row.get("shipped_metrics") or row["metrics"])[spec.metric]

    lines = []
    for (target, budget), today in _by_seed((r for r in rows if r["arm"] == "today"), "target", "budget").items():
        others = (r for r in rows if r["target"] == target and r["arm"] != "today")
        for (arm, arm_budget), other in _by_seed(others, "arm", "budget").items():
            seeds = sorted(set(today) & set(other))
            if len(seeds) < 2:
                continue
            diffs = [score(other[s]) - score(today[s]) for s in seeds]
            mean, low, high = rf.t_interval(diffs)
            speed = [statistics.fmean(rows_[s]["measured_speedup"] for s in seeds) for rows_ in (other, today)]
            per_seed = ", ".join(f"{d:+.1f}" for d in diffs)
            lines.append(f"- {target:g}x, {arm} ({arm_budget}) against today ({budget}), seeds "
                         f"{', '.join(map(str, seeds))}: {mean:+.1f} points (95% interval {low:+.1f} to {high:+.1f}; "
                         f"per seed {per_seed}), at {speed[0]:.2f}x against {speed[1]:.2f}x")
    return ["Paired over seeds (the same seed in both arms; Student-t interval of the differences):", "", *lines, ""] \
        if lines else []


def _by_seed(rows, *keys: str) -> dict[tuple[Any, ...], dict[int, dict[str, Any]]]:
    """Rows grouped by their values of ``keys``, then by seed."""
    groups: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), {})[r["seed"]] = r
    return groups


def write_report(args, rows: list[dict[str, Any]]) -> None:
    done = [r for r in rows if "arm" in r]
    if not done:
        return
    lines = ["# Accuracy against wall-clock minutes (issue 46)", "",
             "`python benchmarks/budget_curve.py` (its docstring says what each arm is). Each cell: the shipped int8 "
             "model's validation score (share of the teacher's) @ the speed-up compress measured, the run's "
             "wall-clock minutes, and where the row says them, the allocation its candidates' comparison kept and "
             "the training's precision. One run at a time, torch's default threads.", ""]
    for name in sorted({r["task"] for r in done}):
        teacher = next((r["teacher_metrics"] for r in done if r["task"] == name and "teacher_metrics" in r), {})
        metric = rf.TASKS[name].metric
        lines += [f"## {name} (teacher {metric} {rf.TASKS[name].points * teacher.get(metric, float('nan')):.1f})", "",
                  "| target | arm | budget | seed | result |", "|---|---|---|---|---|"]
        for r in sorted((r for r in done if r["task"] == name),
                        key=lambda r: (r["target"], _arm_order(r["arm"]), r["budget"], r["seed"])):
            lines.append(f"| {r['target']:g}x | {r['arm']} | {r['budget']} | {r['seed']} | {_score(r, name)} |")
        lines.append("")
        lines += _paired(name, [r for r in done if r["task"] == name and "failed" not in r])
    machines = {common.machine_line(r["machine"], load=False) for r in done if "machine" in r}  # loads: below
    loads = [x for r in done for x in (r.get("load_start") or [])[:1] + (r.get("load_end") or [])[:1]]
    lines += ["Machine: " + "; ".join(sorted(machines)),
              f"Load average (1 min) at the runs' starts and ends: {min(loads):.1f}-{max(loads):.1f}." if loads else ""]
    args.output.write_text("\n".join(lines) + "\n")
    common.stderr_log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
