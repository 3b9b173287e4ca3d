"""How much of a fine-tuned MiniLM's quality survives compression on real tasks (issue 27).

For each dataset, all-MiniLM-L6-v2 (../shared) is fine-tuned on the training split into a teacher (the
budget table below: small enough for a 2-core CPU), scored once (``importance``), then for each width
``prune --width`` -> ``distill`` -> ``finetune --teacher`` (without ghost modules: they did not pay in
benchmarks/studies/ghost-vs-pruned), exported (``export --format onnx --quantize int8``) and evaluated on
the validation split in PyTorch, ONNX fp32 and ONNX int8, each through ``ghostify eval``:

* ``conll2003``: CoNLL-2003 NER, entity F1 as seqeval computes it in strict mode (``tag_scheme: IOB2``;
  the string tags of ``ner_labels``: the ``ner_tags`` ids of the local copy carry no names);
* ``squad``: the local half of SQuAD v1.1 (train: articles 1-20 of its dev set, validation: 21-24),
  exact match and F1 as the official script;
* ``bbc_news``: 5 classes, long texts (truncated to the budget's max length; its validation split has
  no ``label`` column, so the class names of ``label_name`` are the labels);
* ``prompt_injection``: benign / injection.

Classification is scored by accuracy (``ghostify eval``) and macro-F1, which ``eval`` does not report:
the script computes it from the predictions of the same model, rows and batches (and checks that its
accuracy is eval's). Goals (issue 27): at 6/12, >= 97% of the teacher's F1 on CoNLL-2003 and SQuAD and
>= 99% of its accuracy on the classification sets; int8 within 1 point of fp32.

Everything runs through ghostify's recipe runner: one recipe per dataset for the teacher (finetune,
eval, importance) and one per (dataset, width) for the chain, written to ``WORK/<dataset>/*.yaml``
(``ghostify run`` reproduces each). Every finished (dataset, width, runtime) row is appended to
``WORK/results.jsonl`` and skipped when the script runs again with the same ``--work``; the recipe
runner also skips finished stages, so an interrupted run resumes where it stopped.

    python benchmarks/tasks_quality.py --work /tmp/tasks-quality                    # ~4 h on an idle 2-core CPU
    python benchmarks/tasks_quality.py --work /tmp/tasks-quality --datasets conll2003 --widths 6/12
    python benchmarks/tasks_quality.py --work /tmp/tasks-quality --levers fp32-head,label-all-subwords   # + levers at 6/12
    python benchmarks/tasks_quality.py --work /tmp/tasks-quality --report-only   # the report from the rows so far
    python benchmarks/tasks_quality.py --work /tmp/tq-quick --quick --output /tmp/tq-quick.md   # smoke test (~8 min idle, 17 at load 8)

``--minilm`` and ``--data`` default to the local copies in ``../shared`` beside the repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
RESULTS = REPO / "benchmarks" / "results" / "tasks_quality.md"
RUNTIMES = ("pytorch", "onnx fp32", "onnx int8")
ROWS = "results.jsonl"


@dataclass(frozen=True)
class Dataset:
    folder: str  # under --data
    kind: str  # classification, tokens or qa
    data: dict[str, Any]  # the recipe's data: keys (task preset, columns, scheme)
    metrics: tuple[str, ...]  # reported, the first is the goal's
    goal: float  # the compressed model keeps at least this share of the teacher's goal metric (at 6/12)
    points: float = 100.0  # metric x points = percentage points (SQuAD's metrics are percentages already)


DATASETS = {
    "conll2003": Dataset("conll2003", "tokens", {"task": "conll2003", "tags_column": "ner_labels", "tag_scheme": "IOB2"},
                         ("f1", "precision", "recall"), 0.97),
    "squad": Dataset("squad-v1.1-part", "qa", {"task": "squad"}, ("f1", "exact_match"), 0.97, points=1.0),
    "bbc_news": Dataset("bbc_news", "classification", {"text_columns": ["text"], "label_column": "label_name"},
                        ("accuracy", "macro_f1"), 0.99),
    "prompt_injection": Dataset("prompt_injection", "classification", {"text_columns": ["text"], "label_column": "label"},
                                ("accuracy", "macro_f1"), 0.99),
}
#: the width the goals are stated for
GOAL_WIDTH = "6/12"
#: int8 may lose at most this much of fp32's goal metric, in percentage points
INT8_POINTS = 1.0


@dataclass(frozen=True)
class Budget:
    """What one dataset's runs may spend (None samples: the whole training split)."""

    max_length: int
    teacher_epochs: int
    teacher_samples: int | None
    teacher_lr: float
    importance_samples: int
    distill_epochs: int
    distill_samples: int | None
    distill_lr: float
    finetune_epochs: int
    finetune_samples: int | None
    finetune_lr: float
    batch_size: int = 32
    #: more data: keys (QA windows)
    data: dict[str, Any] = field(default_factory=dict)
    #: distill's prediction-layer weight
    logit_weight: float = 1.0


#: per dataset, sized for about an hour per dataset (teacher and both widths) on an idle 2-core CPU, from the
#: CPU time of one MiniLM training step at 1 thread (batch 32: 2.0 s at 64 tokens, 4.0 s at 128, 10.8 s at 256,
#: 23 s at 384; evaluation about a quarter of that) and the token lengths of each training split; the report's
#: Time table gives the measured minutes. SQuAD at 384 tokens would take ~23 min per epoch: 256 tokens and 2,000
#: questions for the last fine-tuning keep it near the hour; its teacher gets 2 epochs (one epoch of 151 steps left it
#: at 42.6 F1, too weak a teacher to measure what compression keeps).
BUDGETS = {
    "conll2003": Budget(max_length=128, teacher_epochs=2, teacher_samples=None, teacher_lr=1e-4, importance_samples=1024,
                        distill_epochs=2, distill_samples=None, distill_lr=2e-4, finetune_epochs=1,
                        finetune_samples=None, finetune_lr=1e-4),
    "squad": Budget(max_length=256, teacher_epochs=2, teacher_samples=None, teacher_lr=1e-4, importance_samples=512,
                    distill_epochs=1, distill_samples=None, distill_lr=2e-4, finetune_epochs=1, finetune_samples=2000,
                    finetune_lr=1e-4, data={"doc_stride": 64}),
    "bbc_news": Budget(max_length=256, teacher_epochs=3, teacher_samples=None, teacher_lr=1e-4, importance_samples=512,
                       distill_epochs=2, distill_samples=None, distill_lr=2e-4, finetune_epochs=1, finetune_samples=None,
                       finetune_lr=1e-4),
    "prompt_injection": Budget(max_length=64, teacher_epochs=2, teacher_samples=None, teacher_lr=1e-4,
                               importance_samples=1024, distill_epochs=2, distill_samples=None, distill_lr=2e-4,
                               finetune_epochs=1, finetune_samples=None, finetune_lr=1e-4),
}


@dataclass(frozen=True)
class Lever:
    """One change to the 6/12 chain that may win back what compression or int8 lost (``--levers``): its settings
    are merged into the chain recipe's ``data:`` or stages. A lever that changes only the export re-exports the
    plain chain's final model (no training)."""

    what: str  # one line for the report
    kinds: tuple[str, ...]  # the dataset kinds it applies to
    data: dict[str, Any] = field(default_factory=dict)
    prune: dict[str, Any] = field(default_factory=dict)
    distill: dict[str, Any] = field(default_factory=dict)
    distill_epochs_factor: int = 1  # the budget's distillation epochs times this
    finetune: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)

    @property
    def export_only(self) -> bool:
        return not (self.data or self.prune or self.distill or self.finetune or self.distill_epochs_factor != 1)


#: the levers issue 27 names that the toolkit has (--keep-fp32 by its family-independent module groups)
LEVERS = {
    "label-all-subwords": Lever("every sub-word of a word labelled (B- continues as I-) in distill and finetune",
                                ("tokens",), data={"label_all_subwords": True}),
    "logit-weight-3": Lever("distill's prediction-layer weight 3 (1 in the plain chain)",
                            ("tokens", "qa", "classification"), distill={"logit_weight": 3.0}),
    "distill-epochs-x2": Lever("twice the distillation epochs", ("tokens", "qa", "classification"),
                               distill_epochs_factor=2),
    "global": Lever("prune --allocation global (one ranking over all layers) instead of uniform width",
                    ("tokens", "qa", "classification"), prune={"allocation": "global"}),
    "fp32-head": Lever("export --keep-fp32 task-head (int8 elsewhere)", ("tokens", "qa", "classification"),
                       export={"keep_fp32": ["task-head"]}),
    "fp32-ffn-out": Lever("export --keep-fp32 task-head,ffn-down (every FFN output projection and the head)",
                          ("tokens", "qa", "classification"), export={"keep_fp32": ["task-head", "ffn-down"]}),
}

#: --quick: a few dozen examples of each split, 64 tokens, one epoch
QUICK_ROWS = {"train": 48, "validation": 32}
QUICK = Budget(max_length=64, teacher_epochs=1, teacher_samples=None, teacher_lr=1e-4, importance_samples=16,
               distill_epochs=1, distill_samples=None, distill_lr=2e-4, finetune_epochs=1, finetune_samples=None,
               finetune_lr=1e-4, batch_size=16, data={"doc_stride": 16})


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the runs and results.jsonl (reused)")
    p.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, of {', '.join(DATASETS)}")
    p.add_argument("--widths", default="6/12,3/12", help="comma-separated prune --width values")
    p.add_argument("--minilm", type=Path, default=SHARED / "models" / "all-MiniLM-L6-v2")
    p.add_argument("--data", type=Path, default=SHARED / "data", help="the folder of the datasets' local copies")
    p.add_argument("--output", type=Path, default=RESULTS, help=f"the markdown report (default {RESULTS.relative_to(REPO)})")
    p.add_argument("--levers", default="", help=f"comma-separated, of {', '.join(LEVERS)}: also run the {GOAL_WIDTH} "
                   "chain with each (on the datasets it applies to) and report what it bought")
    p.add_argument("--report-only", action="store_true", help="write the report from the rows in --work, run nothing")
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK_ROWS['train']} training and "
                   f"{QUICK_ROWS['validation']} validation rows per dataset, 64 tokens, one epoch, 6/12 only")
    args = p.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown:
        p.error(f"unknown dataset {unknown[0]!r}; choose from {', '.join(DATASETS)}")
    args.levers = [lever.strip() for lever in args.levers.split(",") if lever.strip()]
    unknown = [lever for lever in args.levers if lever not in LEVERS]
    if unknown:
        p.error(f"unknown lever {unknown[0]!r}; choose from {', '.join(LEVERS)}")
    args.widths = ["6/12"] if args.quick else [w.strip() for w in args.widths.split(",") if w.strip()]
    return args


# ----- results.jsonl ------------------------------------------------------------------------------
def variant(row: dict[str, Any]) -> str:
    """The lever a row measured (``plain``: the chain as BUDGETS gives it)."""
    return row.get("lever", "plain")


def has_rows(rows: list[dict[str, Any]], dataset: str, width: str, runtimes=RUNTIMES, lever: str = "plain") -> bool:
    found = {(r["dataset"], r["width"], r["runtime"], variant(r)) for r in rows}
    return all((dataset, width, runtime, lever) in found for runtime in runtimes)


# ----- data -----------------------------------------------------------------------------------
def quick_copy(source: Path, target: Path, spec: Dataset) -> Path:
    """A few dozen seeded rows of each split of ``source`` as parquet files (once); for NER, rows are added
    until every tag of the split appears (ghostify names the tags from the rows it reads)."""
    import datasets

    if (target / "validation.parquet").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    loaded = datasets.load_dataset(str(source))
    for split, count in QUICK_ROWS.items():
        rows = loaded[split].shuffle(seed=0)
        chosen = list(range(count))
        if spec.kind == "tokens":
            column = spec.data["tags_column"]
            wanted = {t for tags in rows[column] for t in tags}
            seen = {t for i in chosen for t in rows[i][column]}
            for i in range(count, len(rows)):
                if seen >= wanted:
                    break
                if set(rows[i][column]) - seen:
                    chosen.append(i)
                    seen |= set(rows[i][column])
        rows.select(chosen).to_parquet(str(target / f"{split}.parquet"))
    return target


# ----- recipes --------------------------------------------------------------------------------
def header(args, name: str, spec: Dataset, budget: Budget, dataset: Path, model: str, teacher: str | None) -> dict:
    data = {**spec.data, **budget.data, "dataset": str(dataset), "max_length": budget.max_length}
    raw = {"description": f"tasks_quality: {name}", "model": model, "data": data, "seed": 0}
    if teacher is not None:
        raw["teacher"] = teacher
    return raw


def training(epochs: int, samples: int | None, lr: float, budget: Budget, **extra) -> dict[str, Any]:
    stage = {"epochs": epochs, "batch_size": budget.batch_size, "learning_rate": lr, **extra}
    return {**stage, "max_samples": samples} if samples is not None else stage


def teacher_recipe(args, name: str, spec: Dataset, budget: Budget, dataset: Path) -> dict:
    """Fine-tune the teacher, evaluate it, score its heads and neurons (shared by every width)."""
    stages = [
        {"finetune": {"output": "teacher", **training(budget.teacher_epochs, budget.teacher_samples, budget.teacher_lr,
                                                      budget)}},
        {"eval": {"output": "teacher-eval"}},
        {"importance": {"output": "scored", "samples": budget.importance_samples}},
    ]
    return {**header(args, name, spec, budget, dataset, str(args.minilm), None), "stages": stages}


def chain_recipe(args, name: str, spec: Dataset, budget: Budget, dataset: Path, width: str, teacher_run: Path,
                 lever: Lever | None = None) -> dict:
    """prune -> distill -> finetune with the teacher -> eval; export ONNX (fp32, int8) -> eval both (with
    ``lever``'s settings merged in)."""
    lever = lever or Lever("the plain chain", ())
    teacher = str(teacher_run / "01-teacher")
    distill = training(budget.distill_epochs * lever.distill_epochs_factor, budget.distill_samples, budget.distill_lr,
                       budget, logit_weight=budget.logit_weight)
    distill.update(lever.distill)
    stages = [
        {"prune": {"width": width, **lever.prune}},
        {"distill": distill},
        {"finetune": {"output": "final", "teacher": teacher, "teacher_weight": 0.5,
                      **training(budget.finetune_epochs, budget.finetune_samples, budget.finetune_lr, budget),
                      **lever.finetune}},
        {"eval": {"output": "eval-pytorch"}},
        *export_stages(lever),
    ]
    raw = header(args, name, spec, budget, dataset, str(teacher_run / "03-scored"), teacher)
    raw["data"].update(lever.data)
    return {**raw, "stages": stages}


def export_stages(lever: Lever) -> list[dict[str, Any]]:
    return [
        {"export": {"output": "onnx", "format": "onnx", "quantize": "int8", **lever.export}},
        {"eval": {"output": "eval-onnx", "model": "${onnx}/model.onnx"}},
        {"eval": {"output": "eval-int8", "model": "${onnx}/model_int8.onnx"}},
    ]


def export_recipe(args, name: str, spec: Dataset, budget: Budget, dataset: Path, final: Path, lever: Lever) -> dict:
    """An export-only lever: the plain chain's final model evaluated, exported with the lever's settings,
    evaluated in both graphs (stage names as the chain's, so the rows read the same)."""
    stages = [{"eval": {"output": "eval-pytorch"}}, *export_stages(lever)]
    return {**header(args, name, spec, budget, dataset, str(final), None), "stages": stages}


def run_recipe(raw: dict, path: Path, run_dir: Path) -> dict[str, Any]:
    import yaml

    from ghostify import recipe as recipes

    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    common.stderr_log(f"ghostify run {path} -o {run_dir}")
    return recipes.run(recipes.load(path), run_dir)


def stage_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's rows by stage name (``01-teacher`` -> ``teacher``)."""
    return {Path(row["directory"]).name.split("-", 1)[1]: row for row in report["stages"]}


# ----- macro-F1 (ghostify eval reports accuracy only) -----------------------------------------------
def classification_scores(model: Path, data: dict[str, Any], max_length: int) -> dict[str, float]:
    """Accuracy and macro-F1 of ``model`` (a checkpoint or an ONNX graph) on the validation split, from its
    predictions on the rows ``ghostify eval`` reads, in its order and batches."""
    import torch
    from torch.utils.data import DataLoader

    from ghostify.checkpoint import load_config
    from ghostify.data import load_split
    from ghostify.export.runtime import GraphModel, onnx_path
    from ghostify.settings import EVAL_BATCH_SIZE, DataSettings, TaskSettings
    from ghostify.steps.common import load_tokenizer
    from ghostify.steps.training_common import task_kind
    from ghostify.tasks import dataset_for

    settings = DataSettings(dataset=data["dataset"], text_columns=tuple(data["text_columns"]),
                            label_column=data["label_column"], max_length=max_length)
    graph = onnx_path(model)
    directory = graph.parent if graph is not None else model
    kind = task_kind(settings, TaskSettings()).for_model(load_config(directory))
    rows = load_split(dataset_for(kind.preset, settings.dataset), kind.preset, kind.preset.validation_split)
    rows.task = kind.with_data(rows)
    evaluation = kind.evaluation(rows, load_tokenizer(directory))
    net = GraphModel(graph) if graph is not None else kind.load(model, role="model", need_trained_head=True).eval()
    predictions, labels = [], []
    with torch.no_grad():
        for batch in DataLoader(evaluation.rows, batch_size=EVAL_BATCH_SIZE, collate_fn=evaluation.collate):
            labels += batch.pop("labels").tolist()
            predictions += net(**batch).logits.argmax(-1).tolist()
    return {"accuracy": sum(p == g for p, g in zip(predictions, labels)) / len(labels),
            "macro_f1": macro_f1(predictions, labels)}


def macro_f1(predictions: list[int], labels: list[int]) -> float:
    """The mean over the classes seen (in either list) of each class's F1 (scikit-learn's macro average)."""
    scores = []
    for c in sorted(set(predictions) | set(labels)):
        tp = sum(p == c and g == c for p, g in zip(predictions, labels))
        fp = sum(p == c and g != c for p, g in zip(predictions, labels))
        fn = sum(p != c and g == c for p, g in zip(predictions, labels))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(scores) / len(scores)


def metrics_of(eval_row: dict[str, Any], spec: Dataset, model: Path, data: dict, max_length: int) -> dict[str, float]:
    metrics = dict(eval_row["metrics"])
    if spec.kind == "classification":
        scores = classification_scores(model, data, max_length)
        if abs(scores["accuracy"] - metrics["accuracy"]) > 1e-9:
            common.stderr_log(f"warning: {model}: accuracy from predictions {scores['accuracy']:.6f} != eval's "
                              f"{metrics['accuracy']:.6f}")
        metrics["macro_f1"] = scores["macro_f1"]
    return {k: metrics[k] for k in spec.metrics}


# ----- one dataset ------------------------------------------------------------------------------
def run_dataset(args, name: str, rows: list[dict[str, Any]]) -> None:
    spec = DATASETS[name]
    budget = QUICK if args.quick else BUDGETS[name]
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    source = args.data / spec.folder
    dataset = quick_copy(source, work / "quick-data", spec) if args.quick else source
    levers = [lever for lever in args.levers if spec.kind in LEVERS[lever].kinds]
    if (all(has_rows(rows, name, w) for w in args.widths) and has_rows(rows, name, "teacher", ("pytorch",))
            and all(has_rows(rows, name, GOAL_WIDTH, lever=lever) for lever in levers)):
        common.stderr_log(f"{name}: every row is in {args.work / ROWS}, skipped")
        return
    teacher_run = work / "teacher"
    report = stage_rows(run_recipe(teacher_recipe(args, name, spec, budget, dataset), work / "teacher.yaml",
                                   teacher_run))
    data = {**spec.data, "dataset": str(dataset)}
    if not has_rows(rows, name, "teacher", ("pytorch",)):
        row = {"dataset": name, "width": "teacher", "runtime": "pytorch", "params": report["teacher"]["params"],
               "metrics": metrics_of(report["teacher-eval"], spec, teacher_run / "01-teacher", data, budget.max_length),
               "seconds": {k: v["wall_time"] for k, v in report.items()}, "budget": dataclasses.asdict(budget)}
        common.append_row(args.work / ROWS, row)
        rows.append(row)
    runs = [(width, "plain") for width in args.widths] + [(GOAL_WIDTH, lever) for lever in levers]
    for width, lever_name in runs:
        if has_rows(rows, name, width, lever=lever_name):
            continue
        slug = "w" + width.replace("/", "-") + ("" if lever_name == "plain" else f"-{lever_name}")
        run_dir = work / slug
        lever = LEVERS.get(lever_name)
        if lever is not None and lever.export_only:  # the plain chain's final model, exported another way
            plain_final = work / ("w" + GOAL_WIDTH.replace("/", "-")) / "03-final"
            if not plain_final.is_dir():
                common.stderr_log(f"{name}: lever {lever_name} needs the plain {GOAL_WIDTH} chain; add {GOAL_WIDTH} "
                                  "to --widths")
                continue
            chain = stage_rows(run_recipe(export_recipe(args, name, spec, budget, dataset, plain_final, lever),
                                          work / f"{slug}.yaml", run_dir))
            final, first = plain_final, 1
            params = next((r["params"] for r in rows if r["dataset"] == name and r["width"] == GOAL_WIDTH
                           and variant(r) == "plain"), None)
        else:
            chain = stage_rows(run_recipe(chain_recipe(args, name, spec, budget, dataset, width, teacher_run, lever),
                                          work / f"{slug}.yaml", run_dir))
            final, first, params = run_dir / "03-final", 4, chain["final"]["params"]
        onnx = run_dir / f"{first + 1:02d}-onnx"
        models = {"pytorch": final, "onnx fp32": onnx / "model.onnx", "onnx int8": onnx / "model_int8.onnx"}
        evals = {"pytorch": "eval-pytorch", "onnx fp32": "eval-onnx", "onnx int8": "eval-int8"}
        for runtime in RUNTIMES:
            if has_rows(rows, name, width, (runtime,), lever=lever_name):
                continue
            row = {"dataset": name, "width": width, "runtime": runtime, "params": params,
                   "metrics": metrics_of(chain[evals[runtime]], spec, models[runtime], data, budget.max_length),
                   "seconds": {k: v["wall_time"] for k, v in chain.items()}, "budget": dataclasses.asdict(budget)}
            if lever is not None:
                row.update(lever=lever_name, lever_settings=dataclasses.asdict(lever))
            common.append_row(args.work / ROWS, row)
            rows.append(row)


# ----- the report -------------------------------------------------------------------------------
def result_table(rows: list[dict[str, Any]], datasets: list[str], widths: list[str]) -> str:
    found = {(r["dataset"], r["width"], r["runtime"]): r for r in rows if variant(r) == "plain"}
    headers = ["dataset", "width", "metric", "teacher", "compressed PyTorch (% of teacher)", "ONNX fp32", "ONNX int8",
               "int8 - fp32 (points)", "goal met?"]
    lines = []
    for name in datasets:
        spec = DATASETS[name]
        teacher = found.get((name, "teacher", "pytorch"))
        for width in widths:
            cells = {runtime: found.get((name, width, runtime)) for runtime in RUNTIMES}
            if teacher is None or any(c is None for c in cells.values()):
                continue
            for metric in spec.metrics:
                t = teacher["metrics"][metric]
                value = {runtime: cells[runtime]["metrics"][metric] for runtime in RUNTIMES}
                kept = value["pytorch"] / t if t else float("nan")
                drop = spec.points * (value["onnx int8"] - value["onnx fp32"])
                lines.append([name, width, metric, f"{t:.4f}", f"{value['pytorch']:.4f} ({100 * kept:.1f}%)",
                              f"{value['onnx fp32']:.4f}", f"{value['onnx int8']:.4f}", f"{drop:+.2f}",
                              goal(spec, width, metric, kept, drop)])
    return common.markdown_table(headers, lines)


def lever_table(rows: list[dict[str, Any]], datasets: list[str]) -> str:
    """Each lever's goal metric at the goal width beside the plain chain's: PyTorch, int8, and int8 - fp32."""
    found = {(r["dataset"], r["width"], r["runtime"], variant(r)): r for r in rows}
    headers = ["dataset", "lever", "what it changes", "metric", "PyTorch (vs plain, points)",
               "ONNX int8 (vs plain, points)", "int8 - fp32 (points)", "% of teacher (PyTorch)"]
    lines = []
    for name in datasets:
        spec, metric = DATASETS[name], DATASETS[name].metrics[0]
        teacher = found.get((name, "teacher", "pytorch", "plain"))
        plain = {rt: found.get((name, GOAL_WIDTH, rt, "plain")) for rt in RUNTIMES}
        if teacher is None or any(v is None for v in plain.values()):
            continue
        for lever_name, lever in LEVERS.items():
            cells = {rt: found.get((name, GOAL_WIDTH, rt, lever_name)) for rt in RUNTIMES}
            if any(v is None for v in cells.values()):
                continue
            value = {rt: cells[rt]["metrics"][metric] for rt in RUNTIMES}
            base = {rt: plain[rt]["metrics"][metric] for rt in RUNTIMES}
            lines.append([name, lever_name, lever.what, metric,
                          f"{value['pytorch']:.4f} ({spec.points * (value['pytorch'] - base['pytorch']):+.2f})",
                          f"{value['onnx int8']:.4f} ({spec.points * (value['onnx int8'] - base['onnx int8']):+.2f})",
                          f"{spec.points * (value['onnx int8'] - value['onnx fp32']):+.2f}",
                          f"{100 * value['pytorch'] / teacher['metrics'][metric]:.1f}%"])
    return common.markdown_table(headers, lines) if lines else "(no lever measured)"


def goal(spec: Dataset, width: str, metric: str, kept: float, drop: float) -> str:
    if metric != spec.metrics[0]:
        return ""
    parts = []
    if width == GOAL_WIDTH:
        parts.append(f"{'yes' if kept >= spec.goal else 'NO'} (>= {100 * spec.goal:.0f}% kept)")
    parts.append(f"{'yes' if drop >= -INT8_POINTS else 'NO'} (int8 within {INT8_POINTS:g} point)")
    return "; ".join(parts)


def budget_table(datasets: list[str], quick: bool) -> str:
    headers = ["dataset", "max length", "teacher (epochs / samples / lr)", "importance samples",
               "distill (epochs / samples / lr / logit weight)", "finetune --teacher (epochs / samples / lr)", "batch",
               "other data settings"]

    def samples(n):
        return "all" if n is None else str(n)

    lines = []
    for name in datasets:
        b = QUICK if quick else BUDGETS[name]
        other = {**DATASETS[name].data, **b.data}
        lines.append([name, b.max_length, f"{b.teacher_epochs} / {samples(b.teacher_samples)} / {b.teacher_lr:g}",
                      b.importance_samples,
                      f"{b.distill_epochs} / {samples(b.distill_samples)} / {b.distill_lr:g} / {b.logit_weight:g}",
                      f"{b.finetune_epochs} / {samples(b.finetune_samples)} / {b.finetune_lr:g}", b.batch_size,
                      ", ".join(f"{k}={v}" for k, v in other.items())])
    return common.markdown_table(headers, lines)


def time_table(rows: list[dict[str, Any]], datasets: list[str], widths: list[str]) -> str:
    """Wall minutes of every stage: the teacher's (once per dataset) and each width's chain."""
    found = {(r["dataset"], r["width"], r["runtime"], variant(r)): r for r in rows}
    headers = ["dataset", "run", "stages (wall minutes)", "total (min)"]
    lines = []
    for name in datasets:
        runs = [(w, "plain") for w in ["teacher", *widths]] + [(GOAL_WIDTH, lever) for lever in LEVERS]
        for width, lever in runs:
            row = found.get((name, width, "pytorch", lever))
            if row is None:
                continue
            seconds = row["seconds"]
            run = width if lever == "plain" else f"{width} {lever}"
            lines.append([name, run, ", ".join(f"{k} {v / 60:.1f}" for k, v in seconds.items()),
                          f"{sum(seconds.values()) / 60:.1f}"])
    return common.markdown_table(headers, lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    args.work.mkdir(parents=True, exist_ok=True)
    info = common.machine_info()
    rows = common.read_rows(args.work / ROWS)
    started = time.perf_counter()
    for name in args.datasets if not args.report_only else []:
        run_dataset(args, name, rows)
    common.finish_info(info)
    given = argv if argv is not None else sys.argv[1:]
    command = "python benchmarks/tasks_quality.py " + " ".join(shlex.quote(a) for a in given)
    note = (f"{'**Smoke test (--quick)**: a few dozen rows per split, 64 tokens, one epoch; the numbers mean nothing. ' if args.quick else ''}"
            f"all-MiniLM-L6-v2 fine-tuned per dataset (the teacher), importance, prune, distill, finetune --teacher "
            f"(no ghost modules), evaluated on the validation split (`ghostify eval`; macro-F1 from the same "
            f"predictions). One seed (0). Goals: at {GOAL_WIDTH} >= 97% of the teacher's F1 (CoNLL-2003, SQuAD), "
            f">= 99% of its accuracy (classification); int8 within {INT8_POINTS:g} point of fp32. The recipes: "
            f"`{args.work}/<dataset>/teacher.yaml` and `w<width>.yaml` (`ghostify run` reproduces each).")
    invocation = ("This report was written from the rows in `--work` (`--report-only`); the runs were the same "
                  "command without it, one dataset per process at one thread (`OMP_NUM_THREADS=1`)." if args.report_only
                  else f"This invocation: {(time.perf_counter() - started) / 60:.1f} min (finished stages and rows in "
                  "`--work` are reused).")
    report = (f"# Teacher -> compressed on real tasks (MiniLM)\n\nCommand: `{command}`\n\n"
              f"Machine: {common.machine_line(info)}\n\n{invocation}\n\n{note}\n\n"
              f"## Results\n\n{result_table(rows, args.datasets, args.widths)}\n\n"
              f"## Levers (at {GOAL_WIDTH})\n\n{lever_table(rows, args.datasets)}\n\n"
              f"## Budget\n\n{budget_table(args.datasets, args.quick)}\n\n"
              f"## Time\n\n{time_table(rows, args.datasets, args.widths)}\n")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
