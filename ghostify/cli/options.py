"""Option aliases shared by the commands: one name per setting across CLI, YAML and Python.

Commands take the settings dataclasses as parameters (``training: TrainSettings``); the decorator
in ``ghostify.cli.settings_options`` turns each field into the option declared here, with the
field's default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

Model = Annotated[str, typer.Argument(help="Checkpoint: a local directory (ghostify or transformers) or a hub id.", show_default=False)]
Output = Annotated[Path, typer.Option("--output", "-o", help="Checkpoint directory to write (must not exist unless --overwrite).", show_default=False)]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output directory.")]
Dataset = Annotated[str, typer.Option("--dataset", help="Dataset hub id, local directory (nyu-mll/glue layout) or one data file (.csv, .tsv, .json, .jsonl, .parquet; .txt: one text per line).")]
Task = Annotated[str | None, typer.Option("--task", help="Task preset: sst2, mrpc, rte, stsb, cola, qnli, qqp, mnli, wnli (GLUE); conll2003, wnut_17 (tokens); squad, squad_v2 (QA); embeddings (a sentence-transformers model).", show_default=False)]
TextColumns = Annotated[str | None, typer.Option("--text-columns", help="Comma-separated text column(s), for datasets without a preset.", show_default=False)]
LabelColumn = Annotated[str | None, typer.Option("--label-column", help="Label column, for datasets without a preset.", show_default=False)]
Metric = Annotated[str | None, typer.Option("--metric", help="accuracy, f1_accuracy, matthews or pearson_spearman (default: the task's; for other datasets accuracy, or Pearson/Spearman for regression).", show_default=False)]
MaxLength = Annotated[int, typer.Option("--max-length", min=8, help="Truncate inputs to this many tokens.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Examples per batch.")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed of everything the command draws: sample selection, new heads and modules, data order, dropout.")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]


def split_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    columns = tuple(c.strip() for c in text.split(",") if c.strip())
    return columns or None


def split_names(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated flag's names, empty ones kept, so that the step refuses ``''`` instead of
    taking it for a flag not given."""
    return None if text is None else tuple(name.strip() for name in text.split(","))


# ---- settings: one option per field of ghostify.settings, its default taken from the field ----------
MaxSamples = Annotated[int | None, typer.Option("--max-samples", min=1, help="Use a seeded random subset of this many training examples.", show_default=False)]
Epochs = Annotated[int, typer.Option("--epochs", min=1, help="Passes over the training data.")]
MaxSteps = Annotated[int | None, typer.Option("--max-steps", min=1, help="Stop after this many optimizer steps in all (the last of --epochs cut short there; default: every epoch whole).", show_default=False)]
StopStep = Annotated[int | None, typer.Option("--stop-step", min=1, help="End training after this many optimizer steps, the learning-rate schedule still sized by --epochs and --max-steps (where a time budget's deadline stopped a stage: compress records it in budget.json; default: every step).", show_default=False)]
LearningRate = Annotated[float, typer.Option("--learning-rate", help="Peak learning rate (AdamW, linear decay).")]
GhostLearningRate = Annotated[float | None, typer.Option("--ghost-learning-rate", help="Peak learning rate of the ghost kernels and scales, same schedule (default: --learning-rate); at the model's rate they barely move in a short run; 100x moves them about 100x further (in benchmarks/studies/ghost-vs-pruned-medium that did not make the ghosts beat the pruned model).", show_default=False)]
WeightDecay = Annotated[float, typer.Option("--weight-decay", help="AdamW weight decay.")]
WarmupRatio = Annotated[float, typer.Option("--warmup-ratio", help="Fraction of steps with linear warm-up.")]
MaxGradNorm = Annotated[float, typer.Option("--max-grad-norm", help="Gradient clipping norm (0: off).")]
GradientAccumulation = Annotated[int, typer.Option("--gradient-accumulation-steps", min=1, help="Micro-batches per optimizer step.")]
MixedPrecision = Annotated[str, typer.Option("--mixed-precision", help="no, fp16 or bf16.")]
TeacherPrecision = Annotated[str | None, typer.Option(
    "--teacher-precision", show_default=False,
    help="The teacher's passes: no, fp16 or bf16 (default: --mixed-precision's). A large teacher may gain from bf16 "
         "where a small student does not.")]
CheckpointSteps = Annotated[int, typer.Option("--checkpoint-steps", min=1, help="Save the training state every N optimizer steps (for --resume).")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from OUT.partial/.")]
Train = Annotated[str, typer.Option("--train", help="all, or ghost-only (train only the ghost modules).")]
Temperature = Annotated[float, typer.Option("--temperature", help="Softmax temperature of the teacher's soft targets.")]
TeacherWeight = Annotated[float, typer.Option("--teacher-weight", help="Weight w of the teacher's soft cross-entropy; the labels get 1 - w.")]
Dropout = Annotated[float | None, typer.Option("--dropout", help="Dropout on hidden states and the task head (default: the model's; ALBERT found 0 works better).", show_default=False)]
AttentionDropout = Annotated[float | None, typer.Option("--attention-dropout", help="Dropout on attention probabilities (default: the model's).", show_default=False)]
GlobalBatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Examples per optimizer step, over all processes.")]


def _weight(flag: str, what: str) -> Any:
    return Annotated[float, typer.Option(flag, min=0.0, help=f"Weight of {what}.")]


#: the option of every field of the settings dataclasses (ghostify.settings), by field name
SETTING_OPTIONS: dict[str, Any] = {
    # DataSettings
    "task": Task, "dataset": Dataset, "text_columns": TextColumns, "label_column": LabelColumn, "metric": Metric,
    "max_length": MaxLength, "max_samples": MaxSamples,
    "validation_file": Annotated[str | None, typer.Option("--validation-file", help="A .csv, .tsv, .json, .jsonl or .parquet file of validation rows (default: the dataset's validation split; for a single data file as --dataset, 10% of its rows held out).", show_default=False)],
    # TrainSettings
    "epochs": Epochs, "max_steps": MaxSteps, "stop_step": StopStep, "batch_size": GlobalBatchSize,
    "learning_rate": LearningRate,
    "ghost_learning_rate": GhostLearningRate, "weight_decay": WeightDecay,
    "warmup_ratio": WarmupRatio, "max_grad_norm": MaxGradNorm, "gradient_accumulation_steps": GradientAccumulation,
    "mixed_precision": MixedPrecision, "teacher_precision": TeacherPrecision, "seed": Seed,
    "checkpoint_steps": CheckpointSteps,
    "evaluate_first": Annotated[bool, typer.Option("--evaluate-first", help="Evaluate the model before training too: the output is the best of it and every epoch (a fine-tune after distillation never writes a worse student than it started from).")],
    "report_to": Annotated[str | None, typer.Option("--report-to", help="Also log losses, learning rates and evaluations to these experiment trackers (comma-separated: tensorboard, wandb, mlflow; Accelerate's), under OUT/runs/.", show_default=False)],
    # TeacherStoreSettings
    "teacher_store": Annotated[str | None, typer.Option("--teacher-store", help="Keep the teacher's outputs here once computed (hidden states, logits; float16, real tokens only), for every later epoch and for any run or stage given the same directory (a cache: delete it freely). Default: inside OUT.partial for this run, when it reads the teacher in more than one epoch.", show_default=False)],
    "teacher_store_gb": Annotated[float, typer.Option("--teacher-store-gb", min=0.0, help="The most the teacher store may hold, in GiB; rows beyond it are computed at every visit (0: no store).")],
    # StudentSettings
    "train": Train, "dropout": Dropout, "attention_dropout": AttentionDropout,
    # FinetuneWeights
    "teacher_weight": TeacherWeight, "temperature": Temperature,
    # DistillWeights (and its temperature)
    "emb_weight": _weight("--emb-weight", "the embedding-output MSE"),
    "mha_weight": _weight("--mha-weight", "the MSE after every attention block"),
    "ffn_weight": _weight("--ffn-weight", "the MSE after every FFN block"),
    "attention_weight": _weight("--attention-weight", "TinyBERT's attention-score MSE (pre-softmax, padding masked)"),
    "logit_weight": _weight("--logit-weight", "the prediction-layer soft cross-entropy (MSE for regression)"),
    "sop_weight": _weight("--sop-weight", "ALBERT's sentence-order prediction on sentence pairs or multi-sentence texts (swapped-order negatives)"),
    # TaskSettings
    "tokens_column": Annotated[str | None, typer.Option("--tokens-column", help="Token classification: the column of pre-split words (conll2003, wnut_17: tokens).", show_default=False)],
    "tags_column": Annotated[str | None, typer.Option("--tags-column", help="Token classification: the column of one tag per word (conll2003, wnut_17: ner_tags).", show_default=False)],
    "label_all_subwords": Annotated[bool, typer.Option("--label-all-subwords", help="Token classification: label every sub-word of a word (B- continues as I-), not only the first; metrics still read first sub-words.")],
    "tag_scheme": Annotated[str | None, typer.Option("--tag-scheme", help="Entity F1 in seqeval's strict mode with this scheme (IOB1, IOB2, IOE1, IOE2, IOBES, BILOU); default: seqeval's lenient conlleval mode.", show_default=False)],
    "question_column": Annotated[str | None, typer.Option("--question-column", help="Extractive QA: the question column (squad: question).", show_default=False)],
    "context_column": Annotated[str | None, typer.Option("--context-column", help="Extractive QA: the context column (squad: context).", show_default=False)],
    "answers_column": Annotated[str | None, typer.Option("--answers-column", help="Extractive QA: the answers column, SQuAD layout {text: [...], answer_start: [...]}.", show_default=False)],
    "doc_stride": Annotated[int, typer.Option("--doc-stride", min=1, help="Extractive QA, and classification with --chunks: tokens shared by consecutive windows of a text longer than --max-length.")],
    "chunks": Annotated[str | None, typer.Option("--chunks", help="Sentence classification of texts longer than --max-length: cut each into windows of --max-length tokens overlapping by --doc-stride (single-text tasks); training takes every window as a row with its text's label, evaluation pools the windows' logits by mean or max (a regression's scores: mean) and scores each text once. Default: truncate.", show_default=False)],
    "max_answer_length": Annotated[int, typer.Option("--max-answer-length", min=1, help="Extractive QA: the longest answer span, in tokens.")],
    "null_threshold": Annotated[float, typer.Option("--null-threshold", help="SQuAD v2: predict no answer when the null score beats the best span by more than this.")],
    "embedding_loss": Annotated[str, typer.Option("--embedding-loss", help="Embeddings task, distill: cosine, mse or cosine+mse between the student's and the teacher's pooled embeddings.")],
}
#: how a flag's text becomes the field's value, where they differ
CONVERTERS: dict[str, Callable[[Any], Any]] = {"text_columns": split_columns, "report_to": split_columns}
