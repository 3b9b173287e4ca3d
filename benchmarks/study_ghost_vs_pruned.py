"""Does the ghost pay? GhostBERT's comparison (Table 10) at CPU scale, with seeds and error bars.

For every (task, seed) one teacher is fine-tuned and scored once; for every width one pruned
model is made from it. The arms then differ only in what happens to that pruned model before the
same distillation and fine-tuning budget: nothing (``pruned``), ``attach-ghost`` with the paper's
settings (``ghost``), or a ghost variant (initialisation, kernel size, no softmax, no ReLU).

    python benchmarks/study_ghost_vs_pruned.py                       # the main grid, CPU budget
    python benchmarks/study_ghost_vs_pruned.py --grid init --grid ablation
    python benchmarks/study_ghost_vs_pruned.py --report-only         # tables and figure from results
    python benchmarks/study_ghost_vs_pruned.py --report-only --report-tasks sst2,mrpc,rte   # table-sst2-mrpc-rte.md
    # the paper's protocol (a GPU machine that reaches the hub): BERT-base, full training sets,
    # TinyBERT augmentation, 3 epochs of everything at batch 32 and lr 2e-5
    python benchmarks/study_ghost_vs_pruned.py --protocol paper --tasks sst2,mrpc --widths 3/12 --seeds 0
    # issue 23: MiniLM on the full MRPC, RTE and STS-B training sets and 8,000 SST-2 examples, 3/12,
    # the pruned and ghost arms against ghosts trained at their own rate (--ghost-lr-multiplier x the
    # stage's); --grid lr-sweep: the ghost arm at x10, x30, x100 on SST-2
    python benchmarks/study_ghost_vs_pruned.py --protocol medium --epochs 2
    python benchmarks/study_ghost_vs_pruned.py --protocol medium --grid lr-sweep

``--protocol cpu`` (the default) is the budget this study reports from a 2-core machine
(``budget.json``); a results directory holds one budget only: the driver refuses to add arms of
another budget to it. Each arm's row also holds how far training moved the applied ghost kernels
and the other weights from the arm's start (``kernel_drift``, ``weight_drift``, measured as
``ghost_kernel_drift.py`` does); the tables show them where the rows have them.

Each finished arm is one line of ``results.jsonl`` in ``--results``; an arm already there is
skipped, so the study can be stopped at any moment and started again; an arm stopped mid-way goes on
from its last complete stage (distilled/, final/) or training checkpoint. Two processes (one per core)
may run the same grid: each takes the next (task, seed) that no live process holds (a ``claim``
file with its pid in that work directory). Checkpoints go to
``--work`` (not kept in git; ``budget.json`` there too, so another budget cannot reuse them); an arm's
own checkpoints are deleted once its result is written unless ``--keep``. Every row names its
teacher (``teacher_sha``, of the weights): where the work directory is lost and the teacher trained
again to other bytes (another CPU or library version rounds differently), the (task, seed) is refused
rather than pairing new arms with rows of another teacher.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, machine_line  # noqa: E402

from ghost_kernel_drift import kernels_and_weights, relative_change  # noqa: E402

from ghostify.files import write_text_atomically  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

#: two-sided 95% Student-t quantiles by degrees of freedom (paired differences over seeds)
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


@dataclass(frozen=True)
class Arm:
    """One way of turning the pruned model into the student that is distilled and fine-tuned."""

    name: str
    width: str  # "6/12"; "12/12" means unpruned
    ghost: dict[str, Any] | None = None  # attach-ghost settings; None: no ghost modules
    ghost_lr: float | None = None  # set: --ghost-learning-rate is this multiple of each stage's rate
    tasks: tuple[str, ...] | None = None  # the tasks it runs on (None: every task)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.width}"

    def runs_on(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks


#: ``--grid lr-sweep``: the ghost learning-rate multipliers, and the one task they run on
LR_SWEEP = (10.0, 30.0, 100.0)
LR_SWEEP_TASKS = ("sst2",)


def grid_arms(grids: list[str], widths: list[str], init_width: str, ablation_width: str, inits: list[str],
              ghost_lr_multiplier: float = 10.0) -> list[Arm]:
    arms: list[Arm] = []
    if "ghost-lr" in grids:  # issue 23: do ghosts pay once their kernels train at a rate of their own?
        for width in widths:
            m = ghost_lr_multiplier  # in the arm's name: arms at other multipliers share a results directory
            arms += [Arm("pruned", width), Arm("ghost", width, {}), Arm(f"ghost-lr{m:g}", width, {}, m),
                     Arm(f"zero-scale-lr{m:g}", width, {"init": "zero-scale"}, m)]
    if "lr-sweep" in grids:
        for width in widths:
            arms += [Arm("pruned", width, tasks=LR_SWEEP_TASKS), Arm("ghost", width, {}, tasks=LR_SWEEP_TASKS)]
            arms += [Arm(f"ghost-lr{m:g}", width, {}, m, LR_SWEEP_TASKS) for m in LR_SWEEP]
    if "main" in grids:
        for width in widths:
            arms += [Arm("pruned", width), Arm("ghost", width, {})]
        arms.append(Arm("ghost", "12/12", {}))
    if "init" in grids:
        arms += [Arm("pruned", init_width), Arm("ghost", init_width, {})]
        arms += [Arm(f"ghost-init-{init}", init_width, {"init": init}) for init in inits]
    if "ablation" in grids:
        arms += [Arm("pruned", ablation_width), Arm("ghost", ablation_width, {})]
        arms += [Arm(f"ghost-k{k}", ablation_width, {"kernel_size": k}) for k in (1, 5, 9)]
        arms += [Arm("ghost-no-softmax", ablation_width, {"softmax": False}),
                 Arm("ghost-no-relu", ablation_width, {"relu": False})]
    # one arm per configuration, under the name of the first grid that wants it (the lr sweep's x10 is
    # the ghost-lr grid's ghost-lr arm at the default multiplier), on the tasks of every grid wanting it
    unique: dict[str, Arm] = {}
    for arm in arms:
        config = json.dumps([arm.width, arm.ghost, arm.ghost_lr], sort_keys=True)
        first = unique.setdefault(config, arm)
        if first.tasks is not None and first.tasks != arm.tasks:
            tasks = None if arm.tasks is None else (*first.tasks, *(t for t in arm.tasks if t not in first.tasks))
            unique[config] = replace(first, tasks=tasks)
    return list(unique.values())


@dataclass
class Budget:
    """The training budget, the same for every arm (and the teacher's)."""

    train_samples: int | None = 1000  # None: the whole training split
    max_length: int = 64
    teacher_epochs: int = 2
    teacher_learning_rate: float = 1e-4
    importance_samples: int = 512
    distill_epochs: int = 1
    distill_learning_rate: float = 2e-4
    finetune_epochs: int = 1
    finetune_learning_rate: float = 1e-4
    teacher_weight: float = 0.5
    batch_size: int = 32
    augment_mlm: str | None = None  # set: distill on TinyBERT-augmented training data (one per task and seed)
    # only in budgets that set them (budget_record leaves them out otherwise):
    task_samples: dict[str, int] | None = None  # training examples of these tasks (the rest: train_samples)

    def samples(self, task: str) -> int | None:
        """The training examples of ``task`` (None: the whole training split)."""
        return (self.task_samples or {}).get(task, self.train_samples)


def budget_record(budget: Budget) -> dict[str, Any]:
    """What ``budget.json`` holds: every field, less those only some budgets set while they are
    unset (so a results directory made before they existed keeps its budget)."""
    record = asdict(budget)
    if record["task_samples"] is None:
        del record["task_samples"]
    return record


MINILM, LOCAL_GLUE = str(SHARED / "models" / "all-MiniLM-L6-v2"), str(SHARED / "data" / "glue")
CPU_ARMS = dict(grid=["main"], widths="1/12,3/12,6/12")
#: ``--protocol``: the CPU budget; the paper's (Huang et al. 2021, as in recipes/ghostbert-*.yaml); and
#: issue 23's medium one: MiniLM on the full training sets of MRPC, RTE and STS-B and 8,000 SST-2
#: examples, 2 epochs of everything until a pilot sets them (``--epochs``), at 3/12 only
PROTOCOLS = {
    "cpu": dict(model=MINILM, dataset=LOCAL_GLUE, budget=Budget(), **CPU_ARMS),
    "paper": dict(model="bert-base-uncased", dataset="nyu-mll/glue", budget=Budget(
        train_samples=None, max_length=128, teacher_epochs=3, teacher_learning_rate=2e-5, importance_samples=4096,
        distill_epochs=3, distill_learning_rate=2e-5, finetune_epochs=3, finetune_learning_rate=2e-5,
        teacher_weight=1.0, batch_size=32, augment_mlm="bert-base-uncased"), **CPU_ARMS),
    "medium": dict(model=MINILM, dataset=LOCAL_GLUE, budget=Budget(
        train_samples=None, task_samples={"sst2": 8000}, max_length=128, teacher_epochs=2, teacher_learning_rate=1e-4,
        importance_samples=1024, distill_epochs=2, distill_learning_rate=2e-4, finetune_epochs=2,
        finetune_learning_rate=1e-4, teacher_weight=0.5, batch_size=32),
        grid=["ghost-lr"], widths="3/12"),
}


@dataclass
class Study:
    model: str
    dataset: str
    work: Path
    results: Path
    budget: Budget = field(default_factory=Budget)
    keep: bool = False

    # ----- shared per (task, seed) ------------------------------------------------------------
    def unit(self, task: str, seed: int) -> Path:
        """The work directory of one (task, seed): its teacher, scores, pruned models and arms."""
        return self.work / f"{task}-s{seed}"

    def teacher(self, task: str, seed: int) -> Path:
        from ghostify import steps

        out = self.unit(task, seed) / "teacher"
        if not out.is_dir():
            b = self.budget
            steps.finetune(self.model, out, task=task, dataset=self.dataset, max_samples=b.samples(task),
                           max_length=b.max_length, epochs=b.teacher_epochs, learning_rate=b.teacher_learning_rate,
                           batch_size=b.batch_size, seed=seed)
        return out

    def unpaired(self, task: str, seed: int, rows: list[dict[str, Any]]) -> str | None:
        """Why the recorded ``rows`` of (task, seed) cannot be paired with arms trained from this work
        directory's teacher (None when they can). A teacher trained again (the work directory lost, the
        study moved to another machine) need not be the same bytes: another CPU or library version
        rounds differently, and arms from two teachers are no longer paired on one model."""
        if not rows:
            return None
        retrained = not (self.unit(task, seed) / "teacher").is_dir()
        mark = fingerprint(self.teacher(task, seed))
        other = sorted({r["teacher_sha"] for r in rows if r.get("teacher_sha", mark) != mark})
        if other:
            return f"its recorded rows came from teacher {other[0]}, the work directory's teacher is {mark}"
        recorded = next((r for r in rows if r["arm"] == "teacher" and "teacher_sha" not in r), None)
        if retrained and recorded is not None:  # rows from before fingerprints: compare the evaluation
            from ghostify import steps

            metrics = steps.evaluate(self.teacher(task, seed), task=task, dataset=self.dataset,
                                     max_length=self.budget.max_length)["metrics"]
            if metrics != recorded["metrics"]:
                return (f"its teacher was trained again here and scores {glue_score(metrics):.6f}, the recorded "
                        f"one {recorded['score']:.6f}")
        return None

    def scored(self, task: str, seed: int) -> Path:
        from ghostify import steps

        out = self.unit(task, seed) / "scored"
        if not out.is_dir():
            steps.importance(self.teacher(task, seed), out, task=task, dataset=self.dataset,
                             samples=self.budget.importance_samples, max_length=self.budget.max_length, seed=seed)
        return out

    def distill_data(self, task: str, seed: int) -> str:
        """The distillation data: the task's dataset, or its TinyBERT augmentation (made once)."""
        from ghostify import steps

        if self.budget.augment_mlm is None:
            return self.dataset
        out = self.unit(task, seed) / "augmented"
        if not out.is_dir():
            steps.augment(self.budget.augment_mlm, out, dataset=self.dataset, task=task,
                          max_samples=self.budget.samples(task), max_length=self.budget.max_length, seed=seed)
        return str(out)

    def pruned(self, task: str, seed: int, width: str) -> Path:
        from ghostify import steps

        if width == "12/12":
            return self.teacher(task, seed)
        out = self.unit(task, seed) / f"pruned-{width.replace('/', 'of')}"
        if not out.is_dir():
            steps.prune(self.scored(task, seed), out, width=width)
        return out

    # ----- one arm ----------------------------------------------------------------------------
    def arm_dir(self, task: str, seed: int, arm: Arm) -> Path:
        """The arm's checkpoints: ghost/ (when it attaches ghosts), distilled/, final/."""
        return self.unit(task, seed) / "arms" / arm.key.replace("/", "of")

    def run_arm(self, task: str, seed: int, arm: Arm) -> dict[str, Any]:
        from ghostify import steps

        b = self.budget
        started = time.perf_counter()
        root = self.arm_dir(task, seed, arm)
        # an interrupted arm goes on where it stopped (a session's end kills the study): a stage whose
        # checkpoint is complete is not run again, one killed mid-way resumes its OUT.partial, and a
        # resumed ghostify run ends with the weights of an uninterrupted one, so the result is the same
        resumed = root.exists()
        teacher = self.teacher(task, seed)
        student = self.pruned(task, seed, arm.width)
        if arm.ghost is not None:
            if not (root / "ghost").is_dir():
                steps.attach_ghost(student, root / "ghost", seed=seed, **arm.ghost)
            student = root / "ghost"
        start = student
        common = dict(task=task, dataset=self.dataset, max_samples=b.samples(task), max_length=b.max_length,
                      batch_size=b.batch_size, seed=seed)
        distill_data = {**common, "dataset": self.distill_data(task, seed)}
        if b.augment_mlm is not None:  # the augmented set is already the (sub)set's augmentation
            distill_data["max_samples"] = None
        go_on = dict(resume=True, overwrite=True)  # overwrite: a partial run of other settings starts over
        if not (root / "distilled").is_dir():
            steps.distill(teacher, student, root / "distilled", epochs=b.distill_epochs,
                          learning_rate=b.distill_learning_rate, **ghost_rate(arm, b.distill_learning_rate),
                          **distill_data, **go_on)
        if not (root / "final").is_dir():
            steps.finetune(root / "distilled", root / "final", teacher=teacher, teacher_weight=b.teacher_weight,
                           epochs=b.finetune_epochs, learning_rate=b.finetune_learning_rate,
                           **ghost_rate(arm, b.finetune_learning_rate), **common, **go_on)
        final = steps.evaluate(root / "final", task=task, dataset=self.dataset, max_length=b.max_length)
        size = steps.info(root / "final")
        result = {
            "task": task, "seed": seed, "arm": arm.name, "width": arm.width, "ghost": arm.ghost,
            **({"ghost_lr": arm.ghost_lr} if arm.ghost_lr is not None else {}),
            "metrics": final["metrics"], "score": glue_score(final["metrics"]),
            "flops": size["flops"], "params": size["params"], **drift(start, root / "final"),
            "teacher_sha": fingerprint(teacher),
            "seconds": round(time.perf_counter() - started, 1),  # this process's part, where it resumed
            **({"resumed": True} if resumed else {}),
        }
        if not self.keep:
            shutil.rmtree(root, ignore_errors=True)
        return result

    def teacher_result(self, task: str, seed: int) -> dict[str, Any]:
        from ghostify import steps

        teacher = self.teacher(task, seed)
        final = steps.evaluate(teacher, task=task, dataset=self.dataset, max_length=self.budget.max_length)
        size = steps.info(teacher)
        return {"task": task, "seed": seed, "arm": "teacher", "width": "12/12", "ghost": None,
                "metrics": final["metrics"], "score": glue_score(final["metrics"]), "flops": size["flops"],
                "params": size["params"], "teacher_sha": fingerprint(teacher), "seconds": None}


def fingerprint(checkpoint: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a checkpoint's weights: which teacher a row's arm came from."""
    digest = hashlib.sha256()
    for weights in sorted(checkpoint.glob("*.safetensors")):
        with weights.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def ghost_rate(arm: Arm, learning_rate: float) -> dict[str, float]:
    """The stage's ``ghost_learning_rate`` keyword for ``arm`` (none: the stage's own rate)."""
    return {} if arm.ghost_lr is None else {"ghost_learning_rate": arm.ghost_lr * learning_rate}


def drift(start: Path, final: Path) -> dict[str, float | None]:
    """How far distillation and fine-tuning moved the model from the arm's start (the pruned model,
    or it with ghosts): the relative change of the applied ghost kernels (None without ghosts) and
    of every other weight, as benchmarks/ghost_kernel_drift.py measures them."""
    kernels0, weights0 = kernels_and_weights(start)
    kernels1, weights1 = kernels_and_weights(final)
    return {"kernel_drift": relative_change(kernels0, kernels1)[0] if kernels0 else None,
            "weight_drift": relative_change(weights0, weights1)[0]}


def glue_score(metrics: dict[str, float]) -> float:
    """GLUE's convention: the mean of a task's reported metrics (F1 and accuracy for MRPC, Pearson
    and Spearman for STS-B), in points."""
    keys = [k for k in ("accuracy", "f1", "matthews_correlation", "pearson", "spearman") if k in metrics]
    return 100 * statistics.fmean(metrics[k] for k in keys)


# ----- results --------------------------------------------------------------------------------
def read_results(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_result(path: Path, result: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(result) + "\n")
        f.flush()


def result_key(result: dict[str, Any]) -> tuple[str, int, str]:
    return result["task"], int(result["seed"]), f"{result['arm']}@{result['width']}"


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def interval(differences: list[float]) -> tuple[float, float, float] | None:
    """The mean of paired differences and its 95% interval (Student's t); None under two seeds."""
    n = len(differences)
    if n < 2:
        return None
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    half = T_975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_interval(differences: list[float]) -> str:
    bounds = interval(differences)
    if bounds is None:
        return f"{differences[0]:+.1f} (1 seed)" if differences else "–"
    mean, low, high = bounds
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]"


def tables(results: list[dict[str, Any]]) -> str:
    """Markdown: per task and width the teacher, pruned and ghost scores (mean ± std over seeds),
    the paired ghost − pruned difference with its 95% interval, the average over tasks, and the
    ghost variants against the paper's ghost (:func:`variant_table`)."""
    by = {result_key(r): r for r in results}
    tasks = sorted({r["task"] for r in results})
    widths = sorted({r["width"] for r in results if r["arm"] != "teacher"}, key=_width_value, reverse=True)
    arms = [a for a in ("pruned", "ghost") if any(r["arm"] == a for r in results)]  # variants: variant_table
    lines = ["| task | width | teacher | " + " | ".join(arms) + " | ghost − pruned (95% CI) | seeds done |",
             "|---|---|---|" + "---|" * len(arms) + "---|---|"]
    for task in tasks:
        seeds = sorted({int(r["seed"]) for r in results if r["task"] == task})
        teacher = [by[(task, s, "teacher@12/12")]["score"] for s in seeds if (task, s, "teacher@12/12") in by]
        for width in widths:
            cells = []
            for arm in arms:
                values = [by[(task, s, f"{arm}@{width}")]["score"] for s in seeds if (task, s, f"{arm}@{width}") in by]
                cells.append(mean_std(values))
            diffs = [by[(task, s, f"ghost@{width}")]["score"] - by[(task, s, f"pruned@{width}")]["score"]
                     for s in seeds if (task, s, f"ghost@{width}") in by and (task, s, f"pruned@{width}") in by]
            if all(c == "–" for c in cells):
                continue
            done = max(sum((task, s, f"{arm}@{width}") in by for s in seeds) for arm in arms)
            lines.append(f"| {task} | {width} | {mean_std(teacher)} | " + " | ".join(cells) +
                         f" | {paired_interval(diffs)} | {done} |")
    lines += ["", "Average over the tasks (per seed the mean over tasks, over the seeds where every task has "
              "every arm):", "",
              "| width | " + " | ".join(arms) + " | ghost − pruned (95% CI) | seeds |",
              "|---|" + "---|" * len(arms) + "---|---|"]
    for width in widths:
        seeds = seeds_with(by, tasks, width, tuple(arms))
        if not seeds:
            continue
        row = [mean_std(task_means(by, tasks, width, seeds, a)) for a in arms]
        diffs = task_means(by, tasks, width, seeds, "ghost", "pruned") if arms == ["pruned", "ghost"] else []
        lines.append(f"| {width} | " + " | ".join(row) + f" | {paired_interval(diffs)} | {len(seeds)} |")
    lines += variant_table(results, by, tasks)
    lines += decision_table(results, by, tasks)
    lines += drift_table(results)
    return "\n".join(lines) + "\n"


#: the task the first study found under-trained and noisiest (std up to 21 points over seeds); the
#: decision reads the task average with and without it, as issue 23 asks
NOISY_TASK = "stsb"


def decision_table(results: list[dict[str, Any]], by: dict, tasks: list[str]) -> list[str]:
    """Does a ghost arm beat the pruned one? Per arm and width, the paired interval of its task average
    against the pruned arm's (per seed the mean over tasks), over every task and without STS-B: it beats
    the pruned arm where the whole interval is above zero."""
    arms = sorted({(r["arm"], r["width"]) for r in results if r["arm"] not in ("teacher", "pruned")},
                  key=lambda aw: (-_width_value(aw[1]), aw[0]))
    task_sets = [tasks] + ([[t for t in tasks if t != NOISY_TASK]] if NOISY_TASK in tasks and len(tasks) > 2 else [])
    if len(tasks) < 2 or not arms:
        return []
    lines = ["", "Decision: an arm beats the pruned model where the paired 95% interval of the task average is "
             "above zero:", "", "| arm | width | tasks | arm − pruned (95% CI) | seeds | beats pruned |",
             "|---|---|---|---|---|---|"]
    for arm, width in arms:
        for task_set in task_sets:
            seeds = seeds_with(by, task_set, width, (arm, "pruned"))
            if not seeds:  # e.g. a rate-sweep arm, run on one task only
                continue
            diffs = task_means(by, task_set, width, seeds, arm, "pruned")
            bounds = interval(diffs)
            verdict = "–" if bounds is None else "yes" if bounds[1] > 0 else "no"
            lines.append(f"| {arm} | {width} | {', '.join(task_set)} | {paired_interval(diffs)} | {len(seeds)} | "
                         f"{verdict} |")
    return lines


def drift_table(results: list[dict[str, Any]]) -> list[str]:
    """How far training moved each arm from its start: the applied ghost kernels and the other
    weights (relative change, mean over seeds), where the rows measured it."""
    measured = [r for r in results if "weight_drift" in r]
    if not measured:
        return []
    lines = ["", "Drift from the arm's start (pruned, or pruned with ghosts) to the final model: relative change "
             "‖W − W₀‖ / ‖W₀‖, mean over seeds:", "",
             "| task | arm | width | ghost lr | ghost kernels | other weights | seeds |",
             "|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in measured:
        groups.setdefault((r["task"], r["arm"], r["width"]), []).append(r)
    for (task, arm, width), rows in sorted(groups.items(), key=lambda item: item[0][0]):  # arms in run order
        kernels = [r["kernel_drift"] for r in rows if r.get("kernel_drift") is not None]
        rate = rows[0].get("ghost_lr")
        lines.append(f"| {task} | {arm} | {width} | {f'×{rate:g}' if rate else '–'} | "
                     f"{_percent(statistics.fmean(kernels)) if kernels else '–'} | "
                     f"{_percent(statistics.fmean(r['weight_drift'] for r in rows))} | {len(rows)} |")
    return lines


def _percent(value: float) -> str:
    return f"{100 * value:.3g}%"  # three digits: a kernel drift is often a small fraction of a percent


def variant_table(results: list[dict[str, Any]], by: dict, tasks: list[str]) -> list[str]:
    """The ghost variants (initialisations, ablations) against the paper's ghost and the pruned arm
    at the same width: paired differences over seeds with 95% intervals, per task and averaged."""
    variants = sorted({(r["arm"], r["width"]) for r in results if r["arm"] not in ("teacher", "pruned", "ghost")})
    if not variants:
        return []
    lines = ["", "Ghost variants, paired over seeds against the paper's ghost and the pruned model (points, 95% CI):", "",
             "| variant | width | task | variant | variant − ghost | variant − pruned | seeds |", "|---|---|---|---|---|---|---|"]
    for arm, width in variants:
        for task in tasks:
            seeds = sorted(int(r["seed"]) for r in results if (r["task"], r["arm"], r["width"]) == (task, arm, width))
            if not seeds:
                continue
            scores = [by[(task, s, f"{arm}@{width}")]["score"] for s in seeds]
            cells = []
            for other in ("ghost", "pruned"):
                diffs = [by[(task, s, f"{arm}@{width}")]["score"] - by[(task, s, f"{other}@{width}")]["score"]
                         for s in seeds if (task, s, f"{other}@{width}") in by]
                cells.append(paired_interval(diffs))
            lines.append(f"| {arm} | {width} | {task} | {mean_std(scores)} | {cells[0]} | {cells[1]} | {len(seeds)} |")
        if len(tasks) > 1:
            lines.append(_variant_average(arm, width, by, tasks))
    return lines


def _variant_average(arm: str, width: str, by: dict, tasks: list[str]) -> str:
    """The variant's row averaged over tasks: per seed the mean over tasks (of its score, and of its
    paired differences), over the seeds where every task has every arm involved."""
    seeds = seeds_with(by, tasks, width, (arm, "ghost", "pruned"))
    if not seeds:
        return f"| {arm} | {width} | average | – | – | – | 0 |"
    return (f"| {arm} | {width} | average | {mean_std(task_means(by, tasks, width, seeds, arm))} | "
            f"{paired_interval(task_means(by, tasks, width, seeds, arm, 'ghost'))} | "
            f"{paired_interval(task_means(by, tasks, width, seeds, arm, 'pruned'))} | {len(seeds)} |")


def seeds_with(by: dict, tasks: list[str], width: str, arms: tuple[str, ...]) -> list[int]:
    """The seeds for which every task has every one of ``arms`` at ``width``."""
    return sorted({s for (_, s, _) in by if all((t, s, f"{a}@{width}") in by for t in tasks for a in arms)})


def task_means(by: dict, tasks: list[str], width: str, seeds: list[int], arm: str, minus: str | None = None) -> list[float]:
    """Per seed, the mean over tasks of ``arm``'s score, or of its paired difference to ``minus``."""
    def score(task: str, seed: int, name: str) -> float:
        return by[(task, seed, f"{name}@{width}")]["score"]

    return [statistics.fmean(score(t, s, arm) - (score(t, s, minus) if minus else 0.0) for t in tasks) for s in seeds]


def _width_value(width: str) -> float:
    top, _, bottom = width.partition("/")
    return float(top) / float(bottom or 1)


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    """Score against FLOPs, one panel per task, mean over seeds with min–max bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in results})
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.4), dpi=120, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for arm, style in (("pruned", "o-"), ("ghost", "s-"), ("teacher", "*")):
            points = {}
            for r in results:
                if r["task"] == task and r["arm"] == arm:
                    points.setdefault(r["width"], []).append((r["flops"], r["score"]))
            if not points:
                continue
            xs, ys, lo, hi = [], [], [], []
            for width in sorted(points, key=_width_value):
                flops = statistics.fmean(p[0] for p in points[width]) / 1e9
                scores = [p[1] for p in points[width]]
                mean = statistics.fmean(scores)
                xs.append(flops), ys.append(mean), lo.append(mean - min(scores)), hi.append(max(scores) - mean)
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, capsize=3, label=arm, markersize=8 if arm == "teacher" else 5)
        ax.set_title(task)
        ax.set_xlabel("GFLOPs (seq 128)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("GLUE score")
    axes[0][-1].legend(fontsize=8)
    return _save_figure(fig, path)


def plot_arms(results: list[dict[str, Any]], path: Path) -> Path | None:
    """Every arm's score, one panel per task: a dot per seed, a bar at the mean, the teacher's mean as a
    dashed line. Where the arms share a width (the medium study) score-vs-FLOPs stacks them on one x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in results})
    entries = sorted({(r["arm"], r["width"]) for r in results if r["arm"] != "teacher"},
                     key=lambda aw: (-_width_value(aw[1]), aw[0] != "pruned", aw[0] != "ghost", _natural(aw[0])))
    if not tasks or not entries:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(4.0, 0.55 * len(entries) + 1.5) * len(tasks), 3.8), dpi=120,
                             squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for x, (arm, width) in enumerate(entries):
            scores = [r["score"] for r in results if (r["task"], r["arm"], r["width"]) == (task, arm, width)]
            if scores:
                ax.plot([x] * len(scores), scores, "o", color="tab:blue", alpha=0.5, markersize=4)
                ax.plot([x - 0.3, x + 0.3], [statistics.fmean(scores)] * 2, "-", color="black", linewidth=2)
        teacher = [r["score"] for r in results if r["task"] == task and r["arm"] == "teacher"]
        if teacher:
            ax.axhline(statistics.fmean(teacher), linestyle="--", color="tab:green", label="teacher (mean)")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(entries)), [f"{a}@{w}" for a, w in entries], rotation=40, ha="right", fontsize=8)
        ax.set_title(task)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("GLUE score (dots: seeds, bar: mean)")
    return _save_figure(fig, path)


def _save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` whole or not at all: another study process may be plotting too."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    partial = path.with_name(f".{path.stem}.{os.getpid()}.png")
    fig.savefig(partial)
    plt.close(fig)
    partial.replace(path)
    return path


def _natural(name: str) -> str:
    """A sort key that puts ghost-lr10 before ghost-lr30 before ghost-lr100."""
    return re.sub(r"\d+", lambda m: m.group().zfill(6), name)


def write_reports(results_dir: Path, machine: str, tasks: list[str] | None = None) -> None:
    """table.md, score_vs_flops.png and scores_by_arm.png from every result; with ``tasks``, only the tables over
    those tasks, as table-<tasks>.md (e.g. the averages without a task too noisy to read)."""
    results = read_results(results_dir / "results.jsonl")
    if tasks:
        results = [r for r in results if r["task"] in tasks]
    title = "# Ghost vs pruned: results" + (f" on {', '.join(tasks)}" if tasks else "")
    text = f"{title}\n\nMachine: {machine}\n\n" + tables(results)
    write_text_atomically(results_dir / (f"table-{'-'.join(tasks)}.md" if tasks else "table.md"), text)
    if not tasks:
        plot(results, results_dir / "score_vs_flops.png")
        plot_arms(results, results_dir / "scores_by_arm.png")
    print(text)


#: the file in a (task, seed) work directory that names the process running it
CLAIM = "claim"


def claim(unit: Path) -> bool:
    """Take the (task, seed) whose work directory is ``unit`` for this process: a ``claim`` file
    holding its pid, linked into place so that it appears whole or not at all. A claim whose
    process has gone (killed, machine restarted) is taken over; False when a live process holds it."""
    unit.mkdir(parents=True, exist_ok=True)
    path, mine = unit / CLAIM, unit / f"{CLAIM}.{os.getpid()}"
    mine.write_text(str(os.getpid()))
    try:
        for _ in range(3):  # a stale claim to clear, or one released while we looked
            try:
                os.link(mine, path)
                return True
            except FileExistsError:
                try:
                    owner = int(path.read_text())
                except FileNotFoundError:  # released meanwhile: try again
                    continue
                if owner == os.getpid():
                    return True
                if _alive(owner):
                    return False
                path.unlink(missing_ok=True)
        return False
    finally:
        mine.unlink()


def _alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negative pids name process groups, never one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="cpu",
                        help="cpu: the budget of this study's results; paper: BERT-base, full data, augmentation, "
                        "3 epochs; medium: MiniLM, full MRPC/RTE/STS-B and 8,000 SST-2 examples, 3/12, the ghost-lr grid")
    parser.add_argument("--model", help="default: the protocol's (cpu: ../shared all-MiniLM-L6-v2; paper: bert-base-uncased)")
    parser.add_argument("--dataset", help="default: the protocol's (cpu: ../shared/data/glue; paper: nyu-mll/glue)")
    parser.add_argument("--tasks", default="sst2,mrpc,stsb,rte")
    parser.add_argument("--widths", help="default: the protocol's (cpu, paper: 1/12,3/12,6/12; medium: 3/12)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--grid", action="append", choices=["main", "init", "ablation", "ghost-lr", "lr-sweep"],
                        help="which arms (default: the protocol's; cpu, paper: main; medium: ghost-lr): main (pruned "
                        "and ghost at every width, plus 12/12 ghost), init (ghost initialisations at --init-width), "
                        "ablation (kernel 1/5/9, no softmax, no ReLU at 3/12), ghost-lr (pruned, ghost, and ghost and "
                        "zero-scale ghost with --ghost-lr-multiplier at every width), lr-sweep (pruned and ghost, "
                        "and ghost at x10, x30 and x100 the rate, at every width, on SST-2 only)")
    parser.add_argument("--ghost-lr-multiplier", type=float, default=10.0,
                        help="the ghost-lr grid's ghost learning rate, as a multiple of each stage's (in the arms' "
                        "names: ghost-lr10, zero-scale-lr10; arms at several multipliers share one results directory)")
    parser.add_argument("--epochs", type=int,
                        help="teacher, distillation and fine-tuning epochs (default: the protocol's)")
    parser.add_argument("--inits", default="center,zero-scale", help="attach-ghost --init values of the init grid")
    parser.add_argument("--init-width", default="3/12")
    parser.add_argument("--ablation-width", default="3/12")
    parser.add_argument("--train-samples", type=int, help="training examples of every task (default: the protocol's)")
    parser.add_argument("--results", type=Path, help="default: benchmarks/studies/ghost-vs-pruned[-paper|-medium]")
    parser.add_argument("--work", type=Path, help="checkpoints (default: runs/study-ghost-vs-pruned[-paper|-medium])")
    parser.add_argument("--keep", action="store_true", help="keep every arm's checkpoints")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--report-tasks", help="with --report-only: tables over these tasks only, as table-<tasks>.md")
    args = parser.parse_args(argv)
    protocol = PROTOCOLS[args.protocol]
    args.model = args.model or protocol["model"]
    args.dataset = args.dataset or protocol["dataset"]
    args.widths = args.widths or protocol["widths"]
    budget = protocol["budget"]
    if args.train_samples is not None:  # every task's
        budget = replace(budget, train_samples=args.train_samples, task_samples=None)
    if args.epochs is not None:
        if args.epochs < 1:
            parser.error(f"--epochs {args.epochs} must be at least 1")
        budget = replace(budget, teacher_epochs=args.epochs, distill_epochs=args.epochs, finetune_epochs=args.epochs)
    if args.ghost_lr_multiplier <= 0:
        parser.error(f"--ghost-lr-multiplier {args.ghost_lr_multiplier:g} must be positive")
    suffix = "" if args.protocol == "cpu" else f"-{args.protocol}"
    args.results = args.results or REPO / "benchmarks" / "studies" / f"ghost-vs-pruned{suffix}"
    args.work = args.work or REPO / "runs" / f"study-ghost-vs-pruned{suffix}"

    args.results.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    machine = machine_line(info)
    if args.report_tasks and not args.report_only:
        parser.error("--report-tasks chooses the tasks of a report; give it with --report-only")
    if args.report_only:
        tasks = args.report_tasks.split(",") if args.report_tasks else None
        present = sorted({r["task"] for r in read_results(args.results / "results.jsonl")})
        if tasks and not set(tasks) <= set(present):
            print(f"error: --report-tasks {args.report_tasks}: {args.results} has results for "
                  f"{', '.join(present) or 'no task'}; choose among those", file=sys.stderr)
            return 2
        write_reports(args.results, machine, tasks)
        return 0
    warnings.simplefilter("ignore")
    study = Study(args.model, args.dataset, args.work, args.results, budget, args.keep)
    wanted = {**budget_record(study.budget), "model": Path(args.model).name}
    recorded = args.results / "budget.json"
    if read_results(args.results / "results.jsonl") and recorded.is_file() and json.loads(recorded.read_text()) != wanted:
        print(f"error: {args.results} holds results of another budget ({recorded}); give another --results "
              "or the same protocol, --train-samples and --epochs", file=sys.stderr)
        return 2
    # the work directory's teachers, pruned models and interrupted arms are reused: they must be of this budget too
    args.work.mkdir(parents=True, exist_ok=True)
    work_record = args.work / "budget.json"
    if work_record.is_file() and json.loads(work_record.read_text()) != wanted:
        print(f"error: {args.work} holds checkpoints of another budget ({work_record}); give another --work "
              "or the same protocol, --train-samples and --epochs", file=sys.stderr)
        return 2
    # atomic: a second study process reads them while this one writes
    for record in (recorded, work_record):
        write_text_atomically(record, json.dumps(wanted, indent=2) + "\n")
    arms = grid_arms(args.grid or protocol["grid"], args.widths.split(","), args.init_width, args.ablation_width,
                     [i for i in args.inits.split(",") if i], args.ghost_lr_multiplier)
    results_file = args.results / "results.jsonl"

    def finished(task: str, seed: int) -> bool:
        done = {result_key(r) for r in read_results(results_file)}
        return (task, seed, "teacher@12/12") in done and all(
            (task, seed, arm.key) in done for arm in arms if arm.runs_on(task))

    refused = 0  # 1 once a (task, seed) is left alone because its rows came from another teacher
    # task-major, then seed: every (task, seed) finishes its teacher and arms before the next starts.
    # Several processes may run the same grid: each takes the next (task, seed) no live process holds
    for task in args.tasks.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            if finished(task, seed):
                continue
            unit = study.unit(task, seed)
            if not claim(unit):
                print(f"[{time.strftime('%H:%M:%S')}] {task} seed {seed}: another process runs it", flush=True)
                continue
            try:
                # read again under the claim: a process that held it until a moment ago may have finished it
                rows = [r for r in read_results(results_file) if (r["task"], int(r["seed"])) == (task, seed)]
                reason = study.unpaired(task, seed, rows)
                if reason is not None:
                    print(f"error: {task} seed {seed}: {reason}; new arms would not be paired with its recorded ones. "
                          f"Move its rows from {results_file} to superseded.jsonl beside it to run it again here, "
                          f"or restore {unit}", file=sys.stderr, flush=True)
                    refused = 1
                    continue
                done = {result_key(r) for r in rows}
                todo = [arm for arm in arms if (task, seed, arm.key) not in done and arm.runs_on(task)]
                if (task, seed, "teacher@12/12") not in done:
                    append_result(results_file, study.teacher_result(task, seed))
                for arm in todo:
                    print(f"[{time.strftime('%H:%M:%S')}] {task} seed {seed} {arm.key}", flush=True)
                    result = study.run_arm(task, seed, arm)
                    append_result(results_file, result)
                    print(f"    score {result['score']:.2f} in {result['seconds']:.0f} s", flush=True)
            finally:
                (unit / CLAIM).unlink(missing_ok=True)
            write_reports(args.results, machine)
    write_reports(args.results, machine)
    return refused


if __name__ == "__main__":
    sys.exit(main())
