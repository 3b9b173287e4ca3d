"""``compress``'s report: ``report.json`` (what came out and how), ``report.md`` (the same for a reader) and
``speedup.png`` (what each layer kept, and the measured speed-ups against the target)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..files import write_text_atomically
from ..latency_model import Deployment
from ..methods import layer_origin
from ..methods.criteria import get as get_criterion
from ..runtimes import AUTO, target
from ..settings import Budget
from ..steps.fidelity import UNIFORM, candidate_allocations
from ..steps.info import report_size
from ..steps.throughput import REDUCED_PRECISION_SHARE
from .compress_settings import CompressSettings, final_model, shipped_model
from .plan import plan

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
PLOT = "speedup.png"


def candidate_name(name: str) -> str:
    """How the report names a candidate allocation (:func:`ghostify.steps.fidelity.candidate_allocations`): "latency
    search by the Fisher information, rearranged within layers", "uniform width" (a name it does not know: as it
    is)."""
    candidate = candidate_allocations().get(name)
    if name == UNIFORM or candidate is None:
        return "uniform width" if name == UNIFORM else name
    noun = get_criterion(candidate["criterion"]).noun
    return f"latency search by {noun}" + (", rearranged within layers" if candidate["rearrange"] else "")


def described(choice: dict[str, Any]) -> str:
    """The allocation ``choice`` kept, in words."""
    if choice["chosen"] == UNIFORM:
        return f"uniform width {choice['settings']['width']}"
    return f"the {candidate_name(choice['chosen'])}"


def metrics(directory: Path) -> dict[str, Any]:
    """The metrics an eval stage wrote (none where it did not run)."""
    return _evaluation(directory).get("metrics", {})


def main_metric(directory: Path) -> str | None:
    """The task's own metric an eval stage names (what picks a training run's best epoch: the preset's metric,
    entity F1 for token classification, F1 for QA, Spearman for embeddings); None where it names none."""
    name = _evaluation(directory).get("main_metric")
    return name if isinstance(name, str) else None


def _evaluation(directory: Path) -> dict[str, Any]:
    path = directory / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def report(settings: CompressSettings, stages: dict[str, Path], attempts: list[dict[str, Any]], final: dict[str, Any],
           choice: dict[str, Any] | None) -> dict[str, Any]:
    """``report.json``: what came out of a run (``stages``: its stages' directories by name) and how: each
    allocation timed (``attempts``), the shipped model's timing (``final``) and the choice of allocation."""
    teacher = stages.get("teacher") or Path(settings.teacher)
    model = final_model(stages)
    config = load_config(model)
    record = read_record(config)
    heads, neurons = [len(h) for h in record.heads], list(record.ffn)
    adapter = get_adapter(config)  # a pruned config keeps the original sizes: the record lists what is kept
    # the layers of the original model the compressed one keeps (all of them unless layers were dropped)
    origin = layer_origin(record) or (list(range(len(heads))), len(heads))
    deployment, budget, speedup = settings.deployment, settings.chosen, settings.speedup
    teacher_size, size = report_size(teacher, deployment.seq_len), report_size(model, deployment.seq_len)
    return {
        "model": settings.model, "teacher": str(teacher), "task": settings.data.task,
        "target_speedup": speedup, "deployment": dataclasses.asdict(deployment), "budget": settings.budget,
        "budget_settings": dataclasses.asdict(budget), "tolerance": settings.tolerance,
        "measured_speedup": final["measured"], "measured_range": [final["measured_low"], final["measured_high"]],
        "within_tolerance": abs(final["measured"] / speedup - 1) <= settings.tolerance,
        "latency_ms": {"dense": final["dense_ms"], "compressed": final["compressed_ms"]}, "clock": final["clock"],
        # the dense model in every installed deployment, and the speed-up over the fastest (None: not timed)
        "fastest_dense": final.get("fastest_dense"), "dense_deployments": final.get("dense_deployments"),
        "wall_ms": final["wall_ms"], "cpu_ms": final["cpu_ms"],
        "allocations": attempts, "reallocated": len(attempts) > 1,
        "teacher_metrics": metrics(stages["teacher-eval"]), "metrics": metrics(stages["final-eval"]),
        "main_metric": main_metric(stages["final-eval"]) or main_metric(stages["teacher-eval"]),
        "shipped_metrics": metrics(stages["shipped-eval"]) if "shipped-eval" in stages else None,
        "params": {"teacher": teacher_size["params"], "compressed": size["params"]},
        "flops": {"teacher": teacher_size["flops"], "compressed": size["flops"]},
        "heads_per_layer": heads, "neurons_per_layer": neurons, "layers": origin[0], "layers_of": origin[1],
        "heads_of": adapter.num_units(config), "neurons_of": adapter.ffn_size(config),
        "model_dir": str(model), "shipped": str(shipped_model(stages, deployment)), "stages_dir": str(model.parent),
        "retraining_free": not budget.trains, "choice": choice,
    }


def write_report(out: Path, report: dict[str, Any]) -> None:
    """``report.json``, ``report.md`` and ``speedup.png`` in ``out``."""
    write_text_atomically(out / REPORT_JSON, json.dumps(report, indent=2, default=str))
    write_text_atomically(out / REPORT_MD, markdown(report))
    plot(out / PLOT, report)


def _metric_line(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return "-"
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _kept(metrics: dict[str, Any] | None, teacher: dict[str, Any] | None, main: str | None) -> str:
    """`` (f1: 98.6% of the teacher's)`` for the task's own metric ``main`` (not the first one listed: for token
    classification that is precision); nothing where either model lacks it."""
    ours, theirs = (metrics or {}).get(main), (teacher or {}).get(main)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ours, theirs)) or not theirs:
        return ""
    return f" ({main}: {100 * ours / theirs:.1f}% of the teacher's)"


def markdown(report: dict[str, Any]) -> str:
    """``report.md``: the target and what was measured, the metrics, each allocation, what each layer kept, the
    budget."""
    d = Deployment(**report["deployment"])
    low, high = report["measured_range"]
    chosen = " (`--runtime auto`: the fastest dense deployment in a timing at the start)" \
        if report.get("runtime_asked") == AUTO else ""
    lines = [
        f"# ghostify compress: {report['model']}",
        "",
        f"Target **{report['target_speedup']:g}x** in {d.describe()}{chosen}; "
        f"measured **{report['measured_speedup']:.2f}x** "
        f"(quartile range {low:.2f}-{high:.2f}x; dense {report['latency_ms']['dense']:.2f} ms, compressed "
        f"{report['latency_ms']['compressed']:.2f} ms, medians of {report['allocations'][0]['rounds']} interleaved rounds, "
        f"{report['clock']} time)"
        + ("" if report["within_tolerance"] else f" — **misses the target by more than {report['tolerance']:.0%}**") + ".",
        *_against_every_deployment(report),
        "",
        "| | teacher | compressed |",
        "|---|---|---|",
        f"| validation | {_metric_line(report['teacher_metrics'])} | {_metric_line(report['metrics'])}"
        f"{_kept(report['metrics'], report['teacher_metrics'], report.get('main_metric'))} |",
    ]
    if report.get("shipped_metrics") is not None:
        lines.append(f"| shipped ({d.runtime}) | | {_metric_line(report['shipped_metrics'])}"
                     f"{_kept(report['shipped_metrics'], report['teacher_metrics'], report.get('main_metric'))} |")
    lines += [
        f"| parameters | {report['params']['teacher']:,} | {report['params']['compressed']:,} |",
        f"| FLOPs (seq {d.seq_len}) | {report['flops']['teacher']:,} | {report['flops']['compressed']:,} |",
        "",
        "Allocations (`prune --speedup`, then the dense and the pruned model timed side by side before any training):",
        "",
        "| attempt | allocation | allocated for | predicted | measured |",
        "|---|---|---|---|---|",
    ]
    for i, a in enumerate(report["allocations"], 1):
        kept = " (kept)" if a.get("kept") and len(report["allocations"]) > 1 else ""
        lines.append(f"| {i}{kept} | {a.get('allocation', 'search')} | {a['allocated_for']:.2f}x | "
                     f"{a['predicted']:.2f}x | {a['measured']:.2f}x |")
    if any(a["allocated_for"] != report["target_speedup"] for a in report["allocations"]):
        lines += ["", "The first allocation missed the target by more than the tolerance: re-allocated with the "
                      "measured correction (allocated for target x predicted / measured; with new layers or channels "
                      "where the old could not reach it, then corrected once by their own miss); the attempt "
                      "measured closest to the target is the one trained and shipped."]
    choice = report.get("choice")
    if choice:
        gaps = ", ".join(f"{candidate_name(name)} {gap:.4g}" for name, gap in choice["gaps"].items())
        by_metric = ""
        if choice.get("metrics"):
            values = ", ".join(f"{candidate_name(name)} {value:.4f}" for name, value in choice["metrics"].items())
            ties = ("the latency searches ahead of uniform width, then by their distance, as the run trains"
                    if choice.get("searches_first") else "then by their distance")
            margin = f" ({choice['standard_error']:.4g})" if "standard_error" in choice else ""
            by_metric = (f"{choice['metric']} on them {values} (the candidates within one standard error{margin} "
                         f"of the best {ties}); ")
        lines += ["", f"Which allocation: each candidate pruned to the same predicted latency, before any training or "
                      f"tuning, and scored on {choice['samples']} training examples the scores did not read: "
                      f"{by_metric}distance to the teacher (the task's distillation loss; lower is closer): {gaps}. "
                      f"Kept: **{described(choice)}**."]
    layers = report.get("layers") or list(range(len(report["heads_per_layer"])))
    dropped = [i for i in range(report.get("layers_of", len(layers))) if i not in layers]
    gone = f" (layer{'s' if len(dropped) > 1 else ''} {','.join(map(str, dropped))} dropped whole)" if dropped else ""
    lines += ["", f"Kept per layer{gone}:", "", "| layer | heads | FFN neurons |", "|---|---|---|"]
    for i, h, n in zip(layers, report["heads_per_layer"], report["neurons_per_layer"]):
        lines.append(f"| {i} | {h} | {n} |")
    b = Budget(**report["budget_settings"])
    if not b.trains:
        search = f"the allocation above ({described(choice)})" if choice else "the latency search"
        budget_line = (f"Budget `{report['budget']}`: retraining-free (Kwon et al. 2022), no training stage: importance "
                       f"(first-order and Fisher) on {b.importance_samples:,} training examples, {search}, and the kept "
                       f"heads' and neurons' scales tuned by least squares on {b.tune_masks:,} unlabelled training "
                       "examples where that brings each block, and the whole model, closer to the teacher.")
    else:
        tuned = f"; the pruned model tuned on {b.tune_masks:,} examples before training" if b.tune_masks else ""
        sized = (report.get("time") or {}).get("budget_seconds") or str(report["budget"]).endswith(".json")
        counts = "every training stage's examples and epochs as below (sized to the time)" if sized else \
            f"{b.describe()} of every training stage"
        # the embeddings task has no labels to fine-tune on: its last distillation is the result
        finetunes = any(row.get("command") == "finetune" for row in report.get("training") or [])
        finetune = (f", {b.finetune_learning_rate:g} (fine-tune with the teacher, weight {b.teacher_weight:g})"
                    if finetunes else "; no labelled fine-tune: the last distillation is the result")
        budget_line = (f"Budget `{report['budget']}`: {counts}, importance on "
                       f"{b.importance_samples:,} examples{tuned}; learning rates {b.teacher_learning_rate:g} (teacher), "
                       f"{b.distill_learning_rate:g} (distill){finetune}.")
    lines += ["", budget_line, *_training_lines(report),
              f"Model: `{report['model_dir']}`; shipped: `{report['shipped']}`; every stage: `{report['stages_dir']}`."]
    return "\n".join(lines) + "\n"


def over_fastest_line(report: dict[str, Any]) -> str | None:
    """"1.94x over the dense model in ONNX Runtime int8; 1.49x over the fastest dense deployment, OpenVINO int8",
    or None where the dense model was not timed in every deployment."""
    best = report.get("fastest_dense")
    if not best:
        return None
    same = target(Deployment(**report["deployment"]).runtime)
    if len(report.get("dense_deployments") or []) == 1:
        return f"{report['measured_speedup']:.2f}x over the dense model in {same.title}, the only deployment installed"
    if best["deployment"] == same.name:
        return (f"{report['measured_speedup']:.2f}x over the dense model in {same.title}, which is also the fastest "
                "dense deployment here")
    return (f"{report['measured_speedup']:.2f}x over the dense model in {same.title}; {best['measured']:.2f}x over the "
            f"fastest dense deployment, {best['title']}")


def _against_every_deployment(report: dict[str, Any]) -> list[str]:
    """The speed-up over the fastest dense deployment, and the dense model's time in each (report.md)."""
    line = over_fastest_line(report)
    if line is None:
        return []
    rows = report["dense_deployments"]
    clock = "CPU" if rows[0]["clock"] == "cpu" else "wall-clock"
    lines = ["", f"**{line}** (the shipped model against the dense model in every installed deployment, taking turns "
                 f"in one timing; medians of {clock} ms):", "", "| dense model in | ms | shipped model's speed-up over it |",
             "|---|---|---|"]
    for row in sorted(rows, key=lambda r: r["ms"]):
        name = f"**{row['title']}** (fastest)" if row["fastest"] else row["title"]
        lines.append(f"| {name} | {row['ms']:.2f} | {row['ms'] / report['latency_ms']['compressed']:.2f}x |")
    best, shipped = report["fastest_dense"], report["deployment"]["runtime"]
    if best["deployment"] == shipped:
        return lines
    if report.get("runtime_asked") == AUTO:  # chosen by a timing at the start: the two are close on this machine
        ms = {row["deployment"]: row["ms"] for row in rows}
        faster = ms[shipped] / best["ms"] - 1
        lines += ["", f"`--runtime auto` chose {target(shipped).title}, the fastest dense deployment in its timing at "
                      f"the start; in this one {best['title']} ran the dense model {faster:.0%} faster "
                      f"(`--runtime {best['deployment']}` compresses for it)."]
    else:  # what a user who ships the dense model would pick
        lines += ["", f"{best['title']} runs the dense model fastest on this machine: `--runtime {best['deployment']}` "
                      "(or `--runtime auto`) compresses for it instead."]
    return lines


def training_summary(recipe: Any, run_dir: Path) -> list[dict[str, Any]]:
    """Each training stage of a run: the examples it read (texts for distillation, labelled ones for the
    fine-tune), its epochs and steps, its precision, and how it got the teacher's outputs (``training.json``)."""
    rows = []
    for planned in plan(recipe, run_dir):
        if not planned.stage.command.trains:
            continue
        path = planned.directory / "training.json"
        if not path.is_file():
            continue
        run = json.loads(path.read_text())
        arguments = planned.arguments
        rows.append({"stage": planned.stage.name, "command": planned.stage.command.name,
                     "examples": (run.get("train") or {}).get("samples"), "epochs": arguments.get("epochs"),
                     "max_steps": arguments.get("max_steps"), "steps": run.get("steps"),
                     "precision": (run.get("settings") or {}).get("mixed_precision", "no"),
                     # where the teacher's passes ran in another precision than the student's steps
                     "teacher_precision": (run.get("settings") or {}).get("teacher_precision"),
                     "teacher_outputs": run.get("teacher_outputs"),
                     # a time budget's deadline ended it there, the schedule sized for ``schedule_steps``
                     "stopped_at": run.get("stopped_at"), "schedule_steps": run.get("schedule_steps"),
                     "masked_copies": arguments.get("masked_copies") or 0,
                     # --evaluate-first: the model it started from scored best, and is what the stage wrote
                     "kept_start": bool(run.get("evaluations")) and run.get("best_step") == 0})
    return rows


def described_count(choice: dict[str, Any]) -> str:
    """What a time budget's stage count was, and why (``compress``'s ``stage_count``)."""
    count, wanted = choice["stages"], choice["by_target"]
    if count == wanted:
        return f"{count} compression stages, as the target calls for: each is predicted to distil for longer than it takes to set up"
    return (f"{count} compression stage{'s' if count > 1 else ''}, not the {wanted} the target calls for: the "
            f"teacher's evaluation and scores took {choice['scoring_seconds']:.0f} s, so another stage's scoring and "
            "allocation would take longer than its distillation would get")


def _training_lines(report: dict[str, Any]) -> list[str]:
    """The compression stages, what each training stage read and how, and where the time went (a timed budget)."""
    lines: list[str] = []
    steps = report.get("compression_stages") or []
    if report.get("stage_count"):
        lines += ["", f"The time budget's stages: {described_count(report['stage_count'])}."]
    if len(steps) > 1:
        lines += ["", f"Compression in {len(steps)} stages (each scores the model so far, prunes it to a predicted "
                      "speed-up over the original, then distils it from the teacher):", "",
                  "| stage | target | measured | examples x epochs |", "|---|---|---|---|"]
        for step in steps:
            counts = step.get("counts")
            read = "the budget's" if counts is None else \
                f"{'all' if counts['max_samples'] is None else format(counts['max_samples'], ',')} x {counts['epochs']}" \
                + (f" (cut at step {counts['max_steps']:,})" if counts.get("max_steps") else "")
            lines.append(f"| {step['step']} | {step['target']:.2f}x | {step['measured']:.2f}x | {read} |")
    rows = report.get("training") or []
    if rows:
        lines += ["", "Training stages (texts for distillation, labelled examples for the fine-tune; the teacher's "
                      "outputs computed once per example and read back from the teacher store):", "",
                  "| stage | examples | epochs | steps | precision | teacher's outputs |", "|---|---|---|---|---|---|"]
        for row in rows:
            kept = row.get("teacher_outputs") or {}
            store = (f"{kept['computed']:,} computed, {kept['reused']:,} read back ({kept['bytes'] / 2**20:,.0f} MiB"
                     + (f"; the head's outputs alone of {kept['head_only']:,}, over the cap" if kept.get("head_only")
                        else "") + ")"
                     if "computed" in kept else kept.get("store", "computed at every step"))
            examples = format(row["examples"], ",") if isinstance(row["examples"], int) else "-"
            if row.get("masked_copies"):
                copies = row["masked_copies"]
                examples += f" (the texts and {copies} masked cop{'y' if copies == 1 else 'ies'} of each)"
            epochs = f"{row['epochs']}, the last cut" if row.get("max_steps") else row["epochs"]
            steps = row["steps"] if row.get("stopped_at") is None else \
                f"{row['steps']:,} of {row['schedule_steps']:,}: stopped at the budget's deadline"
            precision = precision_name(row["precision"]) + \
                ("" if row.get("teacher_precision") in (None, row["precision"]) else
                 f" (the teacher {precision_name(row['teacher_precision'])})")
            lines.append(f"| {row['stage']} | {examples} | {epochs} | {steps} | {precision} | {store} |")
    choice = report.get("teacher_store")
    if choice:
        lines += ["", ("The teacher's outputs were stored and read back" if choice["stored"] else
                       "The teacher's outputs were computed at every step, not stored") +
                  f": on this machine storing a text's outputs and reading them back took {choice['storing_ms']:.2f} + "
                  f"{choice['reading_ms']:.2f} ms, {'less' if choice['stored'] else 'more'} than the teacher's pass "
                  f"({choice['teacher_ms']:.2f} ms; the first stage's throughput probe)."]
    timing = report.get("time") or {}
    if timing.get("budget_seconds"):
        spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(timing.get("stages", {}).items(),
                                                                            key=lambda kv: -kv[1])[:6])
        # a resumed run's clock started with this call: the stages' own recorded times say what the whole run took
        # (the teacher's fine-tune, before the budget began, left out)
        seconds = max(timing["seconds"], sum(s for name, s in timing.get("stages", {}).items()
                                             if not name.endswith("-teacher")))
        lines += ["", f"Time: {seconds / 60:.1f} min of a {timing['budget_seconds'] / 60:.0f}-minute budget "
                      f"(after the teacher existed); the longest stages: {spent}. The counts it chose are in "
                      f"`{report.get('budget_file', 'budget.json')}`: `--budget` that file trains with them again."]
    if report.get("trained_on"):
        precision = report.get("precision") or "no"
        timed = [(k, choice) for k, choice in enumerate(report.get("precisions_timed") or [], 1) if choice]
        if timed:
            lines += ["", f"Training ran on {report['trained_on']}; the throughput probe timed bf16 against float32 "
                          f"and each kind of work ran in bf16 only where it took at most {REDUCED_PRECISION_SHARE:.0%} "
                          "of float32's time (ms an example, the teacher's pass and the student's steps):"]
            lines += [f"- stage {k}: {described_precisions(choice)}" for k, choice in timed]
        else:
            lines += ["", f"Training ran on {report['trained_on']}, " + ("in float32." if precision == "no" else
                                                                           f"in {precision} mixed precision.")]
    for row in rows:
        if row.get("kept_start"):
            lines += ["", f"No epoch of {row['stage']} beat the student it started from on the validation split: that "
                          "student is its output (`--evaluate-first`)."]
    if report.get("dropout") is not None and rows:
        lines += ["", "The student trained without dropout (a time budget's choice: a pruned student learns more per "
                      "step without it, and each step is faster)." if report["dropout"] == 0 else
                  f"The student trained with dropout {report['dropout']:g} on its hidden states and attention."]
    return lines


def precision_name(precision: str) -> str:
    """A training precision as a reader names it."""
    return "float32" if precision == "no" else precision


def described_precisions(choice: dict[str, Any]) -> str:
    """A stage's timed precisions (:func:`~ghostify.steps.throughput.fastest_precisions`' choice) and the times they
    rest on: ``the teacher in bf16, the student in float32 (bf16 3.49 and 14.86; float32 6.88 and 14.13)``."""
    return (f"the teacher in {precision_name(choice['teacher'])}, the student in {precision_name(choice['student'])} ("
            + "; ".join(f"{precision_name(p)} {ms['teacher']:.2f} and {ms['student']:.2f}"
                        for p, ms in choice["ms"].items()) + ")")


def plot(path: Path, report: dict[str, Any]) -> None:
    """``speedup.png``: what each layer keeps, as a share of the original heads and neurons (the counts on the
    bars), and the measured speed-up of each check and of the shipped model against the target."""
    import matplotlib  # a second's import, for the plot alone

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    heads, neurons = report["heads_per_layer"], report["neurons_per_layer"]
    layers = list(report.get("layers") or range(len(heads)))  # original indices: gaps where layers were dropped
    every = list(range(report.get("layers_of") or len(heads)))
    heads_of, neurons_of = report.get("heads_of") or max(heads), report.get("neurons_of") or max(neurons)
    for offset, kept, of, color, what in ((-0.2, heads, heads_of, "tab:blue", "heads"),
                                          (0.2, neurons, neurons_of, "tab:orange", "FFN neurons")):
        bars = left.bar([i + offset for i in layers], [100 * k / of for k in kept], width=0.4, color=color,
                        label=f"{what} (of {of:,})")
        if len(every) <= 16:  # the counts on the bars, where they fit (report.md lists them all)
            left.bar_label(bars, labels=[f"{k:,}" for k in kept], rotation=90, padding=2, fontsize=7)
    for i in sorted(set(every) - set(layers)):
        left.text(i, 2, "dropped", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
    left.axhline(100, color="gray", linestyle=":", linewidth=1)
    left.set_xticks(every)
    left.set_xlim(-0.6, len(every) - 0.4)
    left.set_ylim(0, 130)  # room for the counts above a full bar
    left.set_yticks(range(0, 101, 25))
    left.set_xlabel("layer")
    left.set_ylabel("kept, % of the original")
    left.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False)

    attempts = report["allocations"]
    labels = [f"check {i}\n(predicted {a['predicted']:.2f}x)" for i, a in enumerate(attempts, 1)] + ["shipped"]
    measured = [a["measured"] for a in attempts] + [report["measured_speedup"]]
    # the range of the wall-clock quartiles, where the speed-up is of wall-clock time (one thread: of CPU time)
    ranges = [(a.get("measured_low"), a.get("measured_high")) if a.get("clock") == "wall" else (None, None)
              for a in attempts]
    ranges.append(tuple(report["measured_range"]) if report.get("clock") == "wall" and report.get("measured_range")
                  else (None, None))
    low = [m if lo is None else lo for m, (lo, _) in zip(measured, ranges)]
    high = [m if hi is None else hi for m, (_, hi) in zip(measured, ranges)]
    spread = [[max(0.0, m - lo) for m, lo in zip(measured, low)], [max(0.0, hi - m) for m, hi in zip(measured, high)]]
    colors = ["tab:gray"] * len(attempts) + ["tab:green"]
    best = report.get("fastest_dense")
    if best and best["deployment"] != report["deployment"]["runtime"]:  # the same model over the fastest dense one
        labels.append(f"shipped vs\n{best['title']}")
        measured.append(best["measured"])
        high.append(best["measured"])
        for side in spread:
            side.append(0.0)
        colors.append("tab:purple")
    bars = right.bar(labels, measured, color=colors, yerr=spread if any(map(any, spread)) else None, capsize=3,
                     error_kw={"elinewidth": 1, "ecolor": "black"})
    right.bar_label(bars, labels=[f"{m:.2f}x" for m in measured], label_type="center", fontsize=8, color="white")
    target = right.axhline(report["target_speedup"], color="black", linestyle="--")
    right.set_ylim(0, max([*high, report["target_speedup"]]) * 1.15)
    clock = {"wall": "\n(wall clock; whiskers: quartiles)", "cpu": "\n(CPU time, one thread)"}.get(report.get("clock"), "")
    right.set_ylabel(f"measured speed-up{clock}")
    right.tick_params(axis="x", labelsize=8)
    handles, names = [target, bars[0], bars[len(attempts)]], [f"target {report['target_speedup']:g}x", "pruned model",
                                                              "shipped model"]
    if len(bars) > len(attempts) + 1:
        handles.append(bars[-1])
        names.append("over the fastest dense deployment")
    right.legend(handles, names, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"ghostify compress: {report['target_speedup']:g}x in {Deployment(**report['deployment']).describe()}",
                 fontsize=10)
    fig.tight_layout()
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".png", delete=False) as tmp:
        fig.savefig(tmp.name, dpi=110)
    plt.close(fig)
    os.replace(tmp.name, path)


__all__ = ["PLOT", "REPORT_JSON", "REPORT_MD", "candidate_name", "described", "described_count", "main_metric",
           "markdown", "metrics", "over_fastest_line", "plot", "report", "write_report"]
