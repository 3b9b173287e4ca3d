"""Retraining-free pruning (Kwon et al. 2022) on real tasks: what each step of the search buys, and whether
the tuned model is a better start for distillation (issue 37).

For each task, all-MiniLM-L6-v2 is fine-tuned into a teacher (``WORK/<task>/teacher.yaml``), scored once by
``ghostify importance`` (first-order and Fisher scores in one pass) and pruned without any training, at each
target speed-up, by

* ``first-order``: ``prune --speedup X --criterion loss-gradient --no-rearrange`` (the search before issue 37);
* ``fisher``: the same search with the Fisher information, ``--criterion fisher --no-rearrange``;
* ``rearranged``: + ``--rearrange`` (each layer's units chosen by its block of the Fisher information);
* ``tuned``: + ``--tune-masks N`` (least-squares scales of the kept units);
* ``uniform`` / ``uniform-tuned``: ``prune --width k/96``, the widest whose predicted latency is within the same
  target, without and with tuning (and the Fisher scores' choice inside each layer);

each evaluated on the validation split (``ghostify eval``, PyTorch), with the wall time of its ``prune``. The
speed-ups are measured, not predicted: every distinct pruned shape is exported to ONNX Runtime int8 and timed
against the dense teacher's int8 graph (``ghostify bench``, batch 1 x 128 tokens, 1 thread, the models taking
turns, median CPU time).

``--phase quick`` then trains: at ``--quick-speedup`` (2x), the quick budget's distill and finetune-with-teacher
(``compress --budget quick``'s stages) from the ``first-order`` model, from the ``tuned`` model, and from the
``uniform`` model of the same target, over ``--seeds`` (0,1,2), and reports the paired differences.

Every finished row is appended to ``WORK/results.jsonl`` and skipped on the next run with the same ``--work``.

    python benchmarks/retraining_free.py --work /tmp/rf                                  # phase none, all tasks
    python benchmarks/retraining_free.py --work /tmp/rf --tasks sst2 --speedups 2
    python benchmarks/retraining_free.py --work /tmp/rf --phase quick --tasks sst2,conll2003
    python benchmarks/retraining_free.py --work /tmp/rf --report-only                    # the report from the rows
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
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
RESULTS = REPO / "benchmarks" / "results" / "retraining_free.md"
ROWS = "results.jsonl"
ARMS = ("first-order", "fisher", "rearranged", "tuned", "uniform", "uniform-tuned")
#: ``ghostify compress --budget none``: the candidate closest to the teacher, tuned, exported and measured
COMPRESS = "compress"
QUICK_ARMS = ("first-order", "tuned", "uniform")


@dataclass(frozen=True)
class Task:
    data: dict[str, Any]  # the recipes' data: section (dataset relative to --data)
    teacher: dict[str, Any]  # the teacher's finetune settings
    metric: str  # the one the tables compare
    points: float = 100.0  # metric x points = percentage points

    def data_for(self, root: Path) -> dict[str, Any]:
        return {**self.data, "dataset": str(root / self.data["dataset"])}


TASKS = {
    "sst2": Task({"task": "sst2", "dataset": "glue", "max_length": 128},
                 {"max_samples": 8000, "epochs": 2, "learning_rate": 1e-4, "batch_size": 32}, "accuracy"),
    "mrpc": Task({"task": "mrpc", "dataset": "glue", "max_length": 128},
                 {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32}, "accuracy"),
    "stsb": Task({"task": "stsb", "dataset": "glue", "max_length": 128},
                 {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32}, "pearson"),
    "conll2003": Task({"task": "conll2003", "dataset": "conll2003", "tags_column": "ner_labels", "tag_scheme": "IOB2",
                       "max_length": 128}, {"epochs": 2, "learning_rate": 1e-4, "batch_size": 32}, "f1"),
    "squad": Task({"task": "squad", "dataset": "squad-v1.1-part", "max_length": 256, "doc_stride": 64},
                  {"epochs": 2, "learning_rate": 1e-4, "batch_size": 32}, "f1", points=1.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the runs and results.jsonl (reused)")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    p.add_argument("--speedups", default="1.5,2,3", help="target speed-ups (phase none)")
    p.add_argument("--phase", choices=["none", "quick"], default="none")
    p.add_argument("--arms", default="", help="phase none: only these arms (comma-separated; default every arm)")
    p.add_argument("--quick-speedup", type=float, default=2.0)
    p.add_argument("--seeds", default="0,1,2", help="phase quick: the training seeds")
    p.add_argument("--importance-samples", type=int, default=2048)
    p.add_argument("--tune-examples", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=30, help="timed rounds per model (int8, batch 1 x 128, 1 thread)")
    p.add_argument("--minilm", type=Path, default=SHARED / "models" / "all-MiniLM-L6-v2")
    p.add_argument("--data", type=Path, default=SHARED / "data")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--no-compress", dest="compress", action="store_false",
                   help="phase none: leave out the `ghostify compress --budget none` arm")
    args = p.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for task in args.tasks:
        if task not in TASKS:
            p.error(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    args.speedups = [float(s) for s in args.speedups.split(",") if s.strip()]
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    return args


# ----- rows ---------------------------------------------------------------------------------------
def find(rows: list[dict[str, Any]], **keys: Any) -> dict[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in keys.items())), None)


# ----- the teacher and its scores --------------------------------------------------------------------
def run_recipe(raw: dict[str, Any], path: Path, run_dir: Path) -> dict[str, Any]:
    import yaml

    from ghostify import recipe as recipes

    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    common.stderr_log(f"ghostify run {path} -o {run_dir}")
    return recipes.run(recipes.load(path), run_dir)


def teacher(args, name: str, rows: list[dict[str, Any]]) -> Path:
    """The fine-tuned teacher of ``name`` (trained once) and its row."""
    spec, work = TASKS[name], args.work / name
    work.mkdir(parents=True, exist_ok=True)
    raw = {"description": f"retraining_free teacher {name}", "model": str(args.minilm), "data": spec.data_for(args.data),
           "seed": 0, "stages": [{"finetune": {"output": "teacher", **spec.teacher}}, {"eval": {"output": "teacher-eval"}}]}
    run_recipe(raw, work / "teacher.yaml", work / "run")
    model = work / "run" / "01-teacher"
    if find(rows, task=name, arm="teacher") is None:
        metrics = json.loads((work / "run" / "02-teacher-eval" / "eval.json").read_text())["metrics"]
        common.append_row(args.work / ROWS, row := {"task": name, "arm": "teacher", "metrics": metrics})
        rows.append(row)
    return model


def scored(args, name: str, model: Path, rows: list[dict[str, Any]]) -> Path:
    """``ghostify importance`` of the teacher (first-order and Fisher scores in one pass), timed once."""
    from ghostify import steps

    spec, out = TASKS[name], args.work / name / "scored"
    if not (out / "importance.safetensors").is_file():
        data = spec.data_for(args.data)
        settings = {k: v for k, v in data.items() if k not in ("task", "dataset", "max_length")}
        start = time.perf_counter()
        steps.importance(model, out, dataset=data["dataset"], task=data["task"], max_length=data["max_length"],
                         samples=args.importance_samples, **settings)
        common.append_row(args.work / ROWS, row := {
            "task": name, "arm": "importance", "seconds": time.perf_counter() - start,
            "samples": args.importance_samples})
        rows.append(row)
    return out


def latency_model(args, model: Path) -> Path:
    from ghostify import steps

    out = args.work / "latency-int8"
    if not (out / "latency.json").is_file():
        steps.latency(model, out, runtime="onnx-int8", batch_size=1, seq_len=128, threads=1)
    return out


# ----- the arms ---------------------------------------------------------------------------------------
@dataclass
class Arm:
    name: str
    prune: dict[str, Any]
    shape: tuple = field(default=())


def arms_for(args, speedup: float, latency: Path) -> list[Arm]:
    from ghostify.latency_model import LatencyModel

    costs = LatencyModel.load(latency)
    target = costs.dense_ms() / speedup
    width = uniform_width(costs, target)
    fast = {"speedup": speedup, "latency": str(latency)}
    return [
        Arm("first-order", {**fast, "criterion": "loss-gradient", "rearrange": False}),
        Arm("fisher", {**fast, "criterion": "fisher", "rearrange": False}),
        Arm("rearranged", {**fast, "criterion": "fisher", "rearrange": True}),
        Arm("tuned", {**fast, "criterion": "fisher", "rearrange": True, "tune_masks": args.tune_examples}),
        Arm("uniform", {"width": str(width), "criterion": "fisher", "rearrange": True}),
        Arm("uniform-tuned", {"width": str(width), "criterion": "fisher", "rearrange": True,
                              "tune_masks": args.tune_examples}),
    ]


def uniform_width(costs, target_ms: float) -> Fraction:
    """The widest k/(8·heads) whose uniform pruning the latency model predicts within ``target_ms``."""
    g = costs.geometry
    steps_ = 8 * g.num_heads
    for k in range(steps_, 0, -1):
        w = Fraction(k, steps_)
        heads = math.floor(g.num_heads * w)
        neurons = max(1, math.floor(g.ffn_size * w + Fraction(1, 2)))
        if heads >= 1 and costs.predict([heads] * g.num_layers, [neurons] * g.num_layers) <= target_ms:
            return w
    return Fraction(1, steps_)


def evaluate(args, name: str, model: Path, out: Path) -> dict[str, float]:
    """``ghostify eval`` of ``model`` on the task's validation split, kept in ``out`` (a JSON file)."""
    from ghostify import steps

    if not out.is_file():
        data = TASKS[name].data_for(args.data)
        settings = {k: v for k, v in data.items() if k not in ("task", "dataset", "max_length")}
        result = steps.evaluate(model, dataset=data["dataset"], task=data["task"], max_length=data["max_length"],
                                **settings)
        out.write_text(json.dumps(result, default=str))
    return json.loads(out.read_text())["metrics"]


def run_none(args, name: str, rows: list[dict[str, Any]]) -> None:
    from ghostify import steps
    from ghostify.checkpoint import load_config, read_record
    from ghostify.errors import GhostifyError

    model = teacher(args, name, rows)
    scores = scored(args, name, model, rows)
    latency = latency_model(args, model)
    for speedup in args.speedups:
        for arm in arms_for(args, speedup, latency):
            if args.arms and arm.name not in args.arms.split(","):
                continue
            if find(rows, task=name, arm=arm.name, speedup=speedup, phase="none") is not None:
                continue
            out = args.work / name / f"x{speedup:g}" / arm.name
            if not (out / "config.json").is_file():
                start = time.perf_counter()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        steps.prune(scores, out, **arm.prune)
                except GhostifyError as exc:  # a target beyond what heads and neurons reach on this machine
                    common.stderr_log(f"{name} {speedup:g}x {arm.name}: {exc}")
                    common.append_row(args.work / ROWS, row := {
                        "task": name, "arm": arm.name, "speedup": speedup, "phase": "none", "refused": str(exc)})
                    rows.append(row)
                    continue
                seconds = time.perf_counter() - start
            else:
                seconds = None
            metrics = evaluate(args, name, out, out.parent / f"{arm.name}-eval.json")
            record = read_record(load_config(out))
            prune = next(h for h in reversed(record.history) if h["command"] == "prune")["arguments"]
            common.append_row(args.work / ROWS, row := {
                "task": name, "arm": arm.name, "speedup": speedup, "phase": "none", "metrics": metrics,
                "prune_seconds": seconds, "heads": [len(h) for h in record.heads], "ffn": list(record.ffn),
                "predicted_ms": prune.get("predicted_ms"), "width": prune.get("heads_width"),
                "rearranged": prune.get("rearranged"), "tuned": summary_of_tuning(prune.get("tuned"))})
            rows.append(row)
        measure(args, name, speedup, model, rows)
        if args.compress:
            compressed(args, name, speedup, model, rows)


def compressed(args, name: str, speedup: float, model: Path, rows: list[dict[str, Any]]) -> None:
    """``ghostify compress --budget none`` from the teacher, timed: what it chose, kept and measured."""
    from ghostify.latency_model import Deployment
    from ghostify.recipe.compress import compress
    from ghostify.settings import DataSettings, TaskSettings

    if find(rows, task=name, arm=COMPRESS, speedup=speedup) is not None:
        return
    data = TASKS[name].data_for(args.data)
    task_keys = {f for f in TaskSettings.__dataclass_fields__}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = compress(model, args.work / name / f"x{speedup:g}" / "compress", speedup=speedup, budget="none",
                          deployment=Deployment(runtime="onnx-int8"),  # the runtime its rows were measured in
                          data=DataSettings(**{k: v for k, v in data.items() if k not in task_keys}),
                          task_settings=TaskSettings(**{k: v for k, v in data.items() if k in task_keys}),
                          say=common.stderr_log)
    common.append_row(args.work / ROWS, row := {
        "task": name, "arm": COMPRESS, "speedup": speedup, "phase": "none", "metrics": report["metrics"],
        "shipped_metrics": report.get("shipped_metrics"), "seconds": time.perf_counter() - start,
        "measured_speedup": report["measured_speedup"], "choice": report.get("choice"),
        "heads": report["heads_per_layer"], "ffn": report["neurons_per_layer"], "load": list(os.getloadavg())})
    rows.append(row)


def summary_of_tuning(tuned: Any) -> dict[str, Any] | None:
    if not isinstance(tuned, dict):
        return None
    layers = tuned.get("layers", [])
    applied = [r for r in layers if r.get("applied")]
    return {"examples": tuned.get("examples"), "applied": len(applied), "of": len(layers), "kept": tuned.get("kept"),
            "distance_before": tuned.get("distance_before"), "distance_after": tuned.get("distance_after"),
            "held_out_before": sum(r["held_out_before"] for r in layers),
            "held_out_after": sum(r["held_out_after"] for r in layers)}


def measure(args, name: str, speedup: float, teacher_model: Path, rows: list[dict[str, Any]]) -> None:
    """Every distinct shape of this speed-up's arms against the dense teacher, int8, taking turns."""
    from ghostify import steps

    if find(rows, task=name, arm="measured", speedup=speedup) is not None:
        return
    if not any(find(rows, task=name, arm=arm, speedup=speedup, phase="none", refused=None) for arm in ARMS):
        return
    base = args.work / name / f"x{speedup:g}"
    shapes: dict[str, list[str]] = {}
    for arm in ARMS:
        row = find(rows, task=name, arm=arm, speedup=speedup, phase="none")
        if row is not None and "refused" not in row:
            shapes.setdefault(json.dumps([row["heads"], row["ffn"]]), []).append(arm)
    graphs = [export_int8(teacher_model, args.work / name / "teacher-int8")]
    for arms in shapes.values():
        graphs.append(export_int8(base / arms[0], base / f"{arms[0]}-int8"))
    results = steps.bench(graphs, batch_size=1, seq_len=128, threads=1, rounds=args.rounds)
    dense = results[0]["cpu_median_ms"]
    measured = {arm: {"ms": r["cpu_median_ms"], "speedup": dense / r["cpu_median_ms"]}
                for arms, r in zip(shapes.values(), results[1:]) for arm in arms}
    common.append_row(args.work / ROWS, row := {"task": name, "arm": "measured", "speedup": speedup, "dense_ms": dense,
                                  "arms": measured, "load": list(os.getloadavg())})
    rows.append(row)


def export_int8(model: Path, out: Path) -> str:
    from ghostify import steps

    graph = out / "model_int8.onnx"
    if not graph.is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps.export(model, out, format="onnx", quantize="int8")
    return str(graph)


# ----- phase quick: training from each start ------------------------------------------------------------
def run_quick(args, name: str, rows: list[dict[str, Any]]) -> None:
    from ghostify.settings import BUDGETS

    model = teacher(args, name, rows)
    speedup = args.quick_speedup
    base = args.work / name / f"x{speedup:g}"
    budget = BUDGETS["quick"]
    spec = TASKS[name]
    for seed in args.seeds:
        for arm in QUICK_ARMS:
            if find(rows, task=name, arm=arm, speedup=speedup, phase="quick", seed=seed) is not None:
                continue
            start_model = base / arm
            if not (start_model / "config.json").is_file():
                common.stderr_log(f"{name}: {start_model} is missing: run --phase none --speedups {speedup:g} first")
                continue
            train = {"max_samples": budget.max_samples, "epochs": budget.epochs}
            raw = {"description": f"retraining_free quick {name} {arm} seed {seed}", "model": str(start_model),
                   "teacher": str(model), "data": spec.data_for(args.data), "seed": seed, "stages": [
                       {"distill": {**train, "learning_rate": budget.distill_learning_rate}},
                       {"finetune": {"output": "final", "teacher": str(model), "teacher_weight": budget.teacher_weight,
                                     **train, "learning_rate": budget.finetune_learning_rate}},
                       {"eval": {"output": "final-eval"}}]}
            run_dir = base / f"quick-{arm}-s{seed}"
            start = time.perf_counter()
            run_recipe(raw, base / f"quick-{arm}-s{seed}.yaml", run_dir)
            metrics = json.loads((run_dir / "03-final-eval" / "eval.json").read_text())["metrics"]
            common.append_row(args.work / ROWS, row := {
                "task": name, "arm": arm, "speedup": speedup, "phase": "quick", "seed": seed, "metrics": metrics,
                "seconds": time.perf_counter() - start})
            rows.append(row)


# ----- report ---------------------------------------------------------------------------------------------
def score(row: dict[str, Any] | None, name: str) -> float | None:
    if row is None or "refused" in row:
        return None
    return row["metrics"].get(TASKS[name].metric) * TASKS[name].points


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def t_interval(diffs: list[float]) -> tuple[float, float, float]:
    """Mean and Student-t 95% interval of paired differences."""
    t95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, math.nan, math.nan
    half = t95.get(len(diffs) - 1, 2.0) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


def report(args, rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = ["# Retraining-free pruning and where distillation starts (issue 37)", "",
             f"Command: `python benchmarks/retraining_free.py --work {args.work}` (phase none), then `--phase quick "
             f"--tasks sst2,conll2003`", "", f"Machine: {common.machine_line(info)}. The rows were measured on this machine "
             "over several sessions, one thread per process (`OMP_NUM_THREADS=1`), beside other jobs (load average 2-5); "
             "the thread count and load above are those of the run that wrote this file.", "",
             "all-MiniLM-L6-v2 fine-tuned per task (the teacher), scored once by `ghostify importance` "
             f"({args.importance_samples} training examples; first-order and Fisher scores in one pass), pruned to a "
             "target speed-up of ONNX Runtime int8 at batch 1 x 128 tokens, 1 thread, with no training: `first-order` "
             "is the search before issue 37 (E|dL/dg|), `fisher` the same search by E[(dL/dg)^2], `rearranged` adds "
             "each layer's choice by its Fisher block, `tuned` adds mask tuning on "
             f"{args.tune_examples} unlabelled training examples; `uniform` is `prune --width k/96`, the widest whose "
             "predicted latency meets the same target (Fisher scores, rearranged), `uniform-tuned` the same tuned. "
             "Scores on the validation split in PyTorch; speed-ups measured: every distinct shape exported to int8 "
             "and timed against the dense teacher's int8 graph, taking turns (median CPU time, "
             f"{args.rounds} rounds).", ""]
    names = [n for n in TASKS if find(rows, task=n, arm="teacher")]
    header = ["task", "target", "teacher", *ARMS, "compress --budget none (chosen)"]
    table = []
    for name in names:
        t = score(find(rows, task=name, arm="teacher"), name)
        for speedup in sorted({r["speedup"] for r in rows if r.get("task") == name and r.get("phase") == "none"}):
            measured = (find(rows, task=name, arm="measured", speedup=speedup) or {}).get("arms", {})
            cells = []
            for arm in ARMS:
                r = find(rows, task=name, arm=arm, speedup=speedup, phase="none")
                m = measured.get(arm)
                if r is None:
                    cells.append("-")
                elif "refused" in r:
                    cells.append("out of reach")
                else:
                    cells.append(f"{fmt(score(r, name))} ({score(r, name) - t:+.1f})"
                                 + (f" @{m['speedup']:.2f}x" if m else ""))
            c = find(rows, task=name, arm=COMPRESS, speedup=speedup)
            if c is None:
                cells.append("-")
            else:
                cells.append(f"{fmt(score(c, name))} ({score(c, name) - t:+.1f}) @{c['measured_speedup']:.2f}x, "
                             f"{(c.get('choice') or {}).get('chosen', '?')}, {c['seconds'] / 60:.1f} min")
            table.append([name, f"{speedup:g}x", fmt(t), *cells])
    lines += ["## Without training", "",
              "Each cell: score (points against the teacher) @ measured int8 speed-up.", "",
              common.markdown_table(header, table), "", *noise_lines(args, names, rows), ""]
    timing = []
    for name in names:
        imp = find(rows, task=name, arm="importance")
        per_arm = {arm: [r["prune_seconds"] for r in rows if r.get("task") == name and r.get("arm") == arm
                         and r.get("phase") == "none" and r.get("prune_seconds") is not None] for arm in ARMS}
        timing.append([name, fmt(imp["seconds"] if imp else None, 0),
                       *[fmt(statistics.median(v), 1) if v else "-" for v in per_arm.values()]])
    lines += ["Wall time (s): `importance` once per task, `prune` per arm (median over the targets), one thread, on a "
              "machine shared with other jobs (load average 2-5 while these ran): compare the arms within a row, not "
              "with another machine.", "",
              common.markdown_table(["task", "importance", *ARMS], timing), ""]
    quick = [r for r in rows if r.get("phase") == "quick"]
    if quick:
        lines += ["## At the quick budget", "",
                  f"`distill` + `finetune --teacher` with `compress --budget quick`'s settings, from each start, at "
                  f"{args.quick_speedup:g}x; paired over seeds (the same seed trains every arm of a task): mean and "
                  "Student-t 95% interval of the difference in points.", ""]
        qtable, partial = [], []
        for name in sorted({r["task"] for r in quick}):
            seeds = sorted({r["seed"] for r in quick if r["task"] == name})
            by = {arm: {r["seed"]: score(r, name) for r in quick if r["task"] == name and r["arm"] == arm}
                  for arm in QUICK_ARMS}
            complete = [s for s in seeds if all(s in by[a] for a in QUICK_ARMS)]
            for seed in (s for s in seeds if s not in complete):  # what one seed has so far, unpaired
                partial.append(f"- {name}, seed {seed}: " + ", ".join(
                    f"{a} {by[a][seed]:.1f}" for a in QUICK_ARMS if seed in by[a]) + " (the other arms not run yet)")
            cells = [f"{statistics.fmean(by[a][s] for s in complete):.2f}" if complete else "-" for a in QUICK_ARMS]
            pairs = []
            for a, b in (("tuned", "first-order"), ("tuned", "uniform"), ("first-order", "uniform")):
                if complete:
                    mean, low, high = t_interval([by[a][s] - by[b][s] for s in complete])
                    pairs.append(f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]")
                else:
                    pairs.append("-")
            qtable.append([name, len(complete), *cells, *pairs])
        lines += [common.markdown_table(["task", "seeds", *[f"{a} (mean)" for a in QUICK_ARMS], "tuned - first-order",
                                         "tuned - uniform", "first-order - uniform"], qtable), "", *partial,
                  *([""] if partial else [])]
    return "\n".join(lines) + "\n"


def noise_lines(args, names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """How far apart two arms must be before the evaluation set tells them apart: for an accuracy, the 95%
    half-width of a binomial proportion at the teacher's score on that many validation examples."""
    out = []
    for name in names:
        if TASKS[name].metric != "accuracy":
            continue
        evaluated = args.work / name / "run" / "02-teacher-eval" / "eval.json"
        if not evaluated.is_file():
            continue
        n = json.loads(evaluated.read_text())["samples"]
        p = score(find(rows, task=name, arm="teacher"), name) / 100
        out.append(f"{name}: {n} validation examples; a single accuracy there is known to about "
                   f"±{196 * math.sqrt(p * (1 - p) / n):.1f} points (95%), so differences between arms smaller than "
                   "that are inside the evaluation's noise (the arms are deterministic: no seed varies).")
    return [" ".join(["Noise:", *out])] if out else []


def main(argv=None) -> None:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    info = common.machine_info()
    rows = common.read_rows(args.work / ROWS)
    if not args.report_only:
        for name in args.tasks:
            (run_none if args.phase == "none" else run_quick)(args, name, rows)
    common.finish_info(info)
    text = report(args, common.read_rows(args.work / ROWS), info)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
