"""The settings the data and training commands share, each declared once with its default and its
validation. Each field is also a CLI flag (``--learning-rate``), a recipe key (``learning_rate:``)
and a flat keyword of the step functions (``ghostify.flatten``), always under the field's name.

Example:
    >>> from ghostify.steps import finetune
    >>> finetune("out/ghost", "out/tuned", data=DataSettings(task="sst2"),
    ...          training=TrainSettings(epochs=2, learning_rate=5e-5))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

from .errors import GhostifyError
from .runtimes import AUTO

#: the datasets library id a task name is looked up in (``--dataset``'s default)
DEFAULT_DATASET = "nyu-mll/glue"

MIXED_PRECISION = ("no", "fp16", "bf16")
#: `ghostify eval --batch-size`: evaluation keeps no gradients, so larger batches than training's fit
EVAL_BATCH_SIZE = 64
#: the experiment trackers ``--report-to`` takes (Accelerate's), and the package each needs
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
TRAIN_MODES = ("all", "ghost-only")
#: field metadata: a value the code uses but no flag, recipe key or flat keyword sets
INTERNAL = "internal"
#: ``--seed`` of every command that draws something (training, scoring, augmenting, new modules)
DEFAULT_SEED = 0


def parse_width(text: str | float | Fraction, name: str = "--width") -> Fraction:
    """``"0.25"``, ``"3/12"`` or a number, as an exact fraction in (0, 1] (``prune``'s widths, ``prune-hidden``'s)."""
    try:
        value = Fraction(str(text).strip())
    except (ValueError, ZeroDivisionError):
        raise GhostifyError(f"{name} {text!r} is not a number; give a fraction such as 0.25 or 3/12") from None
    if not 0 < value <= 1:
        raise GhostifyError(f"{name} {text} is outside (0, 1]; give a fraction such as 0.25 or 3/12")
    return value


def checked_speedup(value: object) -> float:
    """``--speedup`` (``prune``'s, ``compress``'s) as a float: a finite number above 1, else one line."""
    speedup = None if isinstance(value, bool) else _float(value)
    if speedup is None or not math.isfinite(speedup) or speedup <= 1:
        raise GhostifyError(f"--speedup {value!r} must be a finite number above 1 (the predicted latency is at most "
                            "dense / X), e.g. 2")
    return speedup


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class DataSettings:
    """Which examples a command reads and how long they may be; a task preset names its columns,
    label and metric, the other fields describe datasets without one."""

    task: str | None = None
    dataset: str = DEFAULT_DATASET
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    metric: str | None = None
    max_length: int = 128  # checked against the models' positions by tokenization.check_max_length
    max_samples: int | None = None  # a seeded random subset of the training examples
    #: a data file (.csv, .tsv, .json, .jsonl, .parquet) that is the validation split; None: the dataset's
    #: (a single data file as --dataset: 10% of its rows held out)
    validation_file: str | None = None

    def validate(self) -> None:
        value = self.max_samples
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise GhostifyError(f"--max-samples {value!r} must be at least 1 (or unset: all)")


@dataclass(frozen=True)
class TaskSettings:
    """How token-classification, extractive-QA and embedding tasks read and score their data: the
    columns of a dataset without a preset (None: the preset's), the sub-word labelling, SQuAD's
    windows and answer decoding, and the embedding distillation loss; and whether sentence
    classification windows long texts (``chunks``, with ``doc_stride``) or truncates them."""

    tokens_column: str | None = None  # pre-split words (a list of strings per row)
    tags_column: str | None = None  # one tag per word (ClassLabel ids or strings)
    label_all_subwords: bool = False  # label every sub-word (B- continues as I-), not only the first
    tag_scheme: str | None = None  # seqeval's strict mode with IOB1, IOB2, IOE1, IOE2, IOBES or BILOU
    question_column: str | None = None
    context_column: str | None = None
    answers_column: str | None = None  # SQuAD layout: {"text": [...], "answer_start": [...]}
    doc_stride: int = 32  # tokens shared by consecutive windows of a long context (less than --max-length)
    #: sentence classification of texts longer than --max-length: None truncates them; mean or max
    #: cuts them into windows overlapping by doc_stride and pools the windows' logits that way
    chunks: str | None = None
    max_answer_length: int = 30  # the longest answer span, in tokens
    null_threshold: float = 0.0  # SQuAD v2: answer "" when the null score beats the best span by more
    embedding_loss: str = "cosine"  # distill: cosine, mse or cosine+mse on the pooled embedding

    def validate(self) -> None:
        if self.doc_stride < 1:
            raise GhostifyError(f"--doc-stride {self.doc_stride} must be at least 1 (tokens shared by windows)")
        if self.max_answer_length < 1:
            raise GhostifyError(f"--max-answer-length {self.max_answer_length} must be at least 1 token")
        if self.chunks is not None and self.chunks not in CHUNK_POOLING:
            raise GhostifyError(f"--chunks {self.chunks!r}: choose {' or '.join(CHUNK_POOLING)} (how a long text's window "
                                "logits are pooled), or leave it unset to truncate at --max-length")
        if self.embedding_loss not in EMBEDDING_LOSSES:
            raise GhostifyError(f"--embedding-loss {self.embedding_loss!r}: choose one of {', '.join(EMBEDDING_LOSSES)}")

    def columns(self) -> dict[str, str | None]:
        """The column settings, as ``resolve_task`` takes them."""
        return {name: getattr(self, name) for name in
                ("tokens_column", "tags_column", "question_column", "context_column", "answers_column")}


EMBEDDING_LOSSES = ("cosine", "mse", "cosine+mse")
#: ``--chunks``: how the windows of a long text are pooled into its prediction
CHUNK_POOLING = ("mean", "max")


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation settings of the training loop; the defaults are the GhostBERT paper's (Table 8)."""

    epochs: int = 3
    # the most optimizer steps in all: the last epoch stops there (None: every epoch whole); what lets a time
    # budget fill its time with part of one more epoch
    max_steps: int | None = None
    # end training after this many optimizer steps, the learning-rate schedule still sized by epochs and max_steps
    # (None: train them all): where a time budget's deadline stopped its last stage, so a re-run trains those bytes
    stop_step: int | None = None
    batch_size: int = 32  # global: examples per optimizer step over every process
    learning_rate: float = 2e-5
    # the ghost modules' kernels and scales (None: learning_rate): softmax-normalised kernels barely
    # move at the model's rate in a short run, and Adam moves a weight by about the rate per step
    ghost_learning_rate: float | None = None
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    gradient_accumulation_steps: int = 1
    mixed_precision: str = "no"
    # the teacher's forward passes (None: as mixed_precision): a frozen teacher's pass may run in another precision
    # than the student's training (a 2-core AMD EPYC with AVX-512 BF16 ran MiniLM's pass a quarter faster in bf16,
    # while its pruned students trained as fast in float32, in half the memory)
    teacher_precision: str | None = None
    seed: int = DEFAULT_SEED
    checkpoint_steps: int = 200
    # evaluate the model before the first step too, as one more candidate for the best checkpoint: a fine-tune
    # that only makes a distilled student worse then writes the student it started from
    evaluate_first: bool = False
    log_steps: int = field(default=10, metadata={INTERNAL: True})
    # experiment trackers (Accelerate's) that also receive the losses and evaluations, logged under OUT/runs/
    report_to: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # "tensorboard,wandb" (a flag or keyword) and a YAML list mean the same trackers
        value = self.report_to
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if value is not None:  # each tracker once: two of one kind would log every value twice into one place
            object.__setattr__(self, "report_to", tuple(dict.fromkeys(v for v in value if v)) or None)

    @property
    def teacher_pass_precision(self) -> str:
        """The precision the teacher's passes run in."""
        return self.teacher_precision or self.mixed_precision

    def validate(self) -> None:
        checks = [
            (self.epochs >= 1, f"--epochs {self.epochs} must be at least 1"),
            (self.max_steps is None or self.max_steps >= 1,
             f"--max-steps {self.max_steps} must be at least 1 (or unset: every epoch whole)"),
            (self.stop_step is None or self.stop_step >= 1,
             f"--stop-step {self.stop_step} must be at least 1 (or unset: every step the schedule has)"),
            (self.batch_size >= 1, f"--batch-size {self.batch_size} must be at least 1"),
            (self.learning_rate > 0, f"--learning-rate {self.learning_rate} must be positive"),
            (self.ghost_learning_rate is None or self.ghost_learning_rate > 0,
             f"--ghost-learning-rate {self.ghost_learning_rate} must be positive (or unset: --learning-rate)"),
            (self.weight_decay >= 0, f"--weight-decay {self.weight_decay} must be 0 or more (the paper: 0)"),
            (0 <= self.warmup_ratio < 1, f"--warmup-ratio {self.warmup_ratio} must be in [0, 1)"),
            (self.max_grad_norm >= 0, f"--max-grad-norm {self.max_grad_norm} must be 0 (off) or more (the paper: 1)"),
            (self.gradient_accumulation_steps >= 1, "--gradient-accumulation-steps must be at least 1"),
            (self.mixed_precision in MIXED_PRECISION, f"--mixed-precision {self.mixed_precision!r}: choose one of {', '.join(MIXED_PRECISION)}"),
            (self.teacher_precision in (None, *MIXED_PRECISION),
             f"--teacher-precision {self.teacher_precision!r}: choose one of {', '.join(MIXED_PRECISION)} (or leave it "
             "unset: --mixed-precision's)"),
            (self.checkpoint_steps >= 1, "--checkpoint-steps must be at least 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise GhostifyError(message)
        check_trackers(self.report_to or ())


def check_trackers(names: tuple[str, ...]) -> None:
    """Each tracker is one Accelerate knows, and its package is installed and imports (checked
    before any work: a tracker that fails later would leave a half-started run behind)."""
    for name in names:
        if name not in TRACKERS:
            raise GhostifyError(f"--report-to {name!r}: choose one or more of {', '.join(TRACKERS)} (comma-separated)")
        package = TRACKERS[name]
        if importlib.util.find_spec(package) is None:
            raise GhostifyError(f"--report-to {name} needs the {package} package, which is not installed: "
                                f"pip install {package} (or leave {name} out)")
        try:  # Accelerate skips, without a word, a tracker whose package has no installed metadata
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise GhostifyError(f"--report-to {name}: {package} can be imported but is not an installed package (no "
                                f"metadata), so Accelerate would not log to it: pip install {package} (or leave "
                                f"{name} out)") from None
        try:
            importlib.import_module(package)
        except Exception as exc:  # whatever a broken installation raises on import
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise GhostifyError(f"--report-to {name}: the {package} package is installed but does not import "
                                f"({type(exc).__name__}: {text}); repair it (pip install --force-reinstall {package}) "
                                f"or leave {name} out of --report-to") from exc


@dataclass(frozen=True)
class StudentSettings:
    """What of the trained model learns, and its dropout (saved with it). ``None`` keeps the
    model's own probabilities; ALBERT found that 0 works better."""

    train: str = "all"  # or "ghost-only": only the ghost modules
    dropout: float | None = None  # hidden states and the task head
    attention_dropout: float | None = None  # attention probabilities

    def validate(self) -> None:
        check_train_mode(self.train)
        for flag, value in (("--dropout", self.dropout), ("--attention-dropout", self.attention_dropout)):
            if value is not None and not 0 <= value < 1:
                raise GhostifyError(f"{flag} {value} must be in [0, 1) (0 turns it off, as ALBERT found works best)")


def check_train_mode(train: str) -> None:
    if train not in TRAIN_MODES:
        raise GhostifyError(f"--train {train!r}: choose all or ghost-only")


@dataclass(frozen=True)
class FinetuneWeights:
    """Fine-tuning with a teacher: ``(1 - w)·task + w·soft-CE`` at ``temperature`` (unused without one)."""

    teacher_weight: float = 1.0
    temperature: float = 1.0

    def validate(self) -> None:
        if not 0 <= self.teacher_weight <= 1:
            raise GhostifyError(f"--teacher-weight {self.teacher_weight} must be in [0, 1] (labels get 1 - weight)")
        if self.temperature <= 0:
            raise GhostifyError(f"--temperature {self.temperature} must be positive")


#: the losses that compare the student with the teacher (SOP compares segments, not the teacher)
TEACHER_LOSSES = ("emb_weight", "mha_weight", "ffn_weight", "attention_weight", "logit_weight")


@dataclass(frozen=True)
class DistillWeights:
    """Weights of GhostBERT's layer-wise distillation losses, TinyBERT's attention-score and
    prediction-layer losses (at ``temperature``) and ALBERT's sentence-order prediction."""

    emb_weight: float = 1.0
    mha_weight: float = 1.0
    ffn_weight: float = 1.0
    attention_weight: float = 0.0
    logit_weight: float = 0.0
    temperature: float = 1.0
    sop_weight: float = 0.0

    def validate(self) -> None:
        for name in (*TEACHER_LOSSES, "sop_weight"):
            if getattr(self, name) < 0:
                raise GhostifyError(f"--{name.replace('_', '-')} {getattr(self, name)} must be >= 0")
        if self.temperature <= 0:
            raise GhostifyError(f"--temperature {self.temperature} must be positive")
        if not any(getattr(self, name) > 0 for name in TEACHER_LOSSES):
            raise GhostifyError("every distillation loss weight is 0; give at least one a positive weight")


@dataclass(frozen=True)
class TeacherStoreSettings:
    """Where a training command keeps its teacher's outputs once computed (``ghostify.training.teacher_store``):
    in ``teacher_store`` (shared by the runs and stages that name it: compress's distill and fine-tune stages
    do), else inside ``OUT.partial`` for this run alone, where the teacher is read in more than one epoch; at
    most ``teacher_store_gb`` GiB of them (0: none, the teacher runs at every step)."""

    teacher_store: str | None = None
    teacher_store_gb: float = 4.0

    def validate(self) -> None:
        value = self.teacher_store_gb
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise GhostifyError(f"--teacher-store-gb {value!r} must be a size in GiB, 0 or more (0: no store, the "
                                "teacher runs at every step), e.g. 4")

    def wanted(self, epochs: int) -> bool:
        """Whether a run of ``epochs`` keeps a store: a named one always, its own where epochs reuse it."""
        return self.teacher_store_gb > 0 and (self.teacher_store is not None or epochs > 1)


# ---- each command's own options ---------------------------------------------------------------------
# Their defaults, declared once: the step's signature (``ghostify.steps``) names the field, and so
# does the CLI option (``ghostify.cli.commands``), which needs the value for ``--help`` before torch
# loads, so it cannot read the step's signature. ``tests/test_defaults_once.py`` checks every command.


@dataclass(frozen=True)
class ImportanceDefaults:
    """``ghostify importance``."""

    samples: int | None = 2048  # a seeded random subset of the training split (None: all of it)
    batch_size: int = 32
    seed: int = DEFAULT_SEED


@dataclass(frozen=True)
class DistillDefaults:
    """``ghostify distill``."""

    #: copies of the training text with some words masked, read besides it (``ghostify.augment.masking``)
    masked_copies: int = 0


@dataclass(frozen=True)
class AugmentDefaults:
    """``ghostify augment``: TinyBERT's replacement probability and candidates per word."""

    replace_prob: float = 0.4
    top_k: int = 15
    batch_size: int = 64  # masked copies per MLM forward pass
    seed: int = DEFAULT_SEED


@dataclass(frozen=True)
class ExportDefaults:
    """``ghostify export``."""

    format: str = "hf"
    #: training examples a calibrated (static) int8 quantisation reads to set the activations' ranges
    calibration_samples: int = 300


#: ``export --keep-fp32`` names for the parts every family has, resolved through its adapter, so one
#: spelling works for BERT, DeBERTa or ModernBERT alike (a hyphen cannot occur in a module name, so
#: none shadows one)
MODULE_GROUPS = {
    "task-head": "the task head, every module outside the encoder: classifier, qa_outputs, ...",
    "attention-output": "every layer's attention output projection",
    "ffn-up": "every layer's first FFN projection, hidden to d_ff, and a gated FFN's gate",
    "ffn-down": "every layer's second FFN projection, d_ff to hidden",
}


@dataclass(frozen=True)
class BenchDefaults:
    """``ghostify bench``: one sequence of 128 tokens on one thread, 3 untimed and 20 timed passes."""

    batch_size: int = 1
    seq_len: int = 128
    threads: int = 1
    rounds: int = 20
    warmup: int = 3


@dataclass(frozen=True)
class LatencyDefaults:
    """``ghostify latency`` (its deployment's defaults are :class:`ghostify.latency_model.Deployment`'s, its
    rounds and warm-up passes ``bench``'s): the seed of the probe models' random weights."""

    seed: int = DEFAULT_SEED


@dataclass(frozen=True)
class InfoDefaults:
    """``ghostify info`` (and the recipe reports' sizes): FLOPs counted at batch 1 and this length."""

    seq_len: int = 128


@dataclass(frozen=True)
class Budget:
    """How much data and training a compression gets: the sample counts and epochs of its stages (0 epochs:
    no training at all, the pruned model tuned by least squares is the result)."""

    max_samples: int | None  # training examples of each training stage (None: all)
    epochs: int
    importance_samples: int
    teacher_learning_rate: float = 1e-4
    distill_learning_rate: float = 2e-4
    finetune_learning_rate: float = 1e-4
    teacher_weight: float = 0.5
    #: unlabelled examples the pruned model's kept heads and neurons are tuned on (``prune --tune-masks``; 0: none)
    tune_masks: int = 0
    #: the dropout of the student's training stages, on hidden states and attention alike (None: the model's own)
    dropout: float | None = None
    #: the labelled fine-tune's output is the best of its epochs and the distilled student it starts from
    #: (``finetune --evaluate-first``)
    evaluate_first: bool = False
    #: copies of the training text with some words masked that every distillation reads too (``distill
    #: --masked-copies``)
    masked_copies: int = DistillDefaults.masked_copies

    @property
    def trains(self) -> bool:
        return self.epochs > 0

    def describe(self) -> str:
        if not self.trains:
            return (f"no training: importance on {self.importance_samples:,} examples, mask tuning on "
                    f"{self.tune_masks:,}")
        samples = "all" if self.max_samples is None else f"{self.max_samples:,}"
        return f"{samples} examples, {self.epochs} epoch{'s' if self.epochs > 1 else ''}"

#: ``--budget``: none is retraining-free (Kwon et al. 2022: the Fisher search, rearrangement and mask tuning on
#: unlabelled examples, no training stage); quick is the quickstart's data budget (minutes on a laptop CPU);
#: standard is the ghost study's medium protocol (8,000 examples, 2 epochs of every stage). The budgets that
#: train start from the tuned model too: at 2x on MiniLM, paired over 3 seeds at the quick budget, distillation
#: from the Fisher search tuned on 2,048 examples beat distillation from the first-order search by +2.3 points
#: on SST-2 and +5.6 F1 on CoNLL-2003, and uniform width by +2.2 F1 on CoNLL-2003 (-0.1 on SST-2, inside the
#: noise): benchmarks/results/retraining_free.md
BUDGETS = {
    "none": Budget(max_samples=None, epochs=0, importance_samples=2048, tune_masks=2048),
    "quick": Budget(max_samples=2000, epochs=1, importance_samples=512, tune_masks=2048),
    "standard": Budget(max_samples=8000, epochs=2, importance_samples=1024, tune_masks=2048),
    #: every example of the task, several epochs: a budget for a GPU
    "full": Budget(max_samples=None, epochs=3, importance_samples=2048, tune_masks=2048, evaluate_first=True),
}
#: what a budget stated in time (``--budget 20m``) or read from an earlier run's ``budget.json`` trains with,
#: besides the counts it plans: the standard budget's rates and scoring, and no dropout. A pruned student fits its
#: teacher less than it could, and dropout's random masks cost a third of a training step on a CPU: the SQuAD
#: part's 3x student (4 layers of 1 head) distilled for the same 300 steps scored F1 31.7 without dropout against
#: 24.4 with the model's 0.1, in 207 s against 319 s (benchmarks/results/budget_curve_xeon.md)
TIMED = replace(BUDGETS["standard"], dropout=0.0, evaluate_first=True)


@dataclass(frozen=True)
class CompressDefaults:
    """``ghostify compress``: the settings that are its own (the deployment's are :class:`Deployment`'s, but for its
    runtime)."""

    #: the runtime it ships in: the installed deployment that runs the dense model fastest here (``--runtime auto``).
    #: On a 2-core Xeon with AMX the SQuAD part at 3x compressed for OpenVINO int8 (the fastest there) kept F1 35.3,
    #: 40.2 and 32.2 on three seeds against 33.5, 35.7 and 31.8 for ONNX Runtime int8, in graphs 1.15-1.44x faster:
    #: a cheaper layer keeps more depth at one latency (benchmarks/results/budget_curve_xeon.md)
    runtime: str = AUTO
    budget: str = "quick"
    #: ghosts stay off: they did not beat the pruned model in benchmarks/studies/ghost-vs-pruned(-medium)
    ghosts: bool = False
    #: whole layers join the allocation where the budget trains (None: on for quick and standard, off for none):
    #: on the MiniLM SST-2 teacher at the quick budget, the same targets with residual channels but no layers
    #: scored 76.7% at 3.94x and 69.5% at 5.14x, with layers too 77.6% at 3.93x and 74.4% at 5.75x (2x: 84.5% at
    #: 1.81x, against 81.8% at 2.04x for heads and neurons alone); benchmarks/results/frontier.md
    drop_layers: bool | None = None
    #: how far the measured speed-up may miss the target before the allocation is corrected once
    tolerance: float = 0.05
    #: held-out training examples the searched and the uniform allocation are compared on with the teacher
    compare_samples: int = 512
    #: "auto": bfloat16 where this machine does it in hardware (``ghostify.device.fast_bf16``), else float32
    mixed_precision: str = "auto"
    rounds: int = BenchDefaults.rounds
    seed: int = DEFAULT_SEED


__all__ = ["AugmentDefaults", "BUDGETS", "BenchDefaults", "Budget", "CompressDefaults", "DataSettings", "DistillDefaults", "DistillWeights", "ExportDefaults", "FinetuneWeights", "ImportanceDefaults",
           "InfoDefaults", "LatencyDefaults", "StudentSettings", "TaskSettings", "TeacherStoreSettings", "TrainSettings",
           "checked_speedup", "parse_width"]
