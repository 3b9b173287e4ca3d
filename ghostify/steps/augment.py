"""``ghostify augment``: TinyBERT-style augmentation of a task's training data with a masked LM."""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..augment import CandidateProposer, default_per_example, example_rng, sample_variants
from ..checkpoint import load_config, load_model
from ..data import DEFAULT_DATASET, label_kind, load_split, resolve_task
from ..errors import CheckpointError, DataError, GhostifyError
from ..files import TOKENIZER_FILES, atomic_directory, check_output_dir
from ..version import __version__
from .common import check_max_length, default_device, load_tokenizer

SPLIT = "train"  # only training data is augmented; every other split is copied unchanged
PROVENANCE_NAME = "augment.json"
AUGMENTED_COLUMN = "augmented"
FORMAT = 1


@dataclass
class AugmentResult:
    """What ``augment`` wrote: counts per split and a few examples to show."""

    output: str
    originals: int
    augmented: int
    duplicates: int  # draws dropped because they equalled the original or an earlier draw
    splits: dict[str, int]
    labels: str
    seconds: float
    examples: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def augment(
    mlm: str | os.PathLike,
    output: str | os.PathLike,
    *,
    dataset: str = DEFAULT_DATASET,
    task: str | None = None,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    per_example: int | None = None,
    replace_prob: float = 0.4,
    top_k: int = 15,
    label_with: str | os.PathLike | None = None,
    max_samples: int | None = None,
    max_length: int = 128,
    batch_size: int = 64,
    seed: int = 0,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> AugmentResult:
    """Augment the training split of ``dataset`` with the masked LM ``mlm`` and write it to ``output``.

    ``output`` is a ``save_to_disk`` dataset directory: ``train`` holds every original example
    followed by its new versions (column ``augmented`` tells them apart), the other splits are
    copied unchanged, and ``augment.json`` records how it was made. ``progress(n, total)`` is
    called as examples are done. The same arguments give a byte-identical directory.

    Example:
        >>> augment("bert-base-uncased", "data/sst2-aug", task="sst2", max_samples=1000)  # doctest: +SKIP
    """
    started = time.perf_counter()
    _check_settings(per_example, replace_prob, top_k, max_length, batch_size, max_samples)
    out = check_output_dir(output, overwrite=overwrite, inputs=(("--dataset", dataset), ("--mlm", mlm), ("--label-with", label_with)))
    check_max_length(max_length, mlm, label_with)
    preset = resolve_task(task, text_columns=text_columns, label_column=label_column)
    n = per_example if per_example is not None else default_per_example(task)

    _require_masked_lm(mlm)
    tokenizer = _mlm_tokenizer(mlm)
    teacher_config = teacher_tokenizer = None
    if label_with is not None:
        teacher_config = _require_classifier(label_with)
        teacher_tokenizer = _checked_tokenizer(label_with, "--label-with")

    data = load_split(dataset, preset, SPLIT, max_samples=max_samples, seed=seed, require_labels=False)
    others = _other_splits(dataset, preset)
    rows = data.rows
    label = preset.label_column
    has_label_column = label in rows.column_names
    label_feature = rows.features[label] if has_label_column else None
    # the one label rule of every command (ghostify.data.label_kind); without labels, the column's type
    regression = preset.is_regression or (label_kind(rows, label, dataset=str(dataset)).regression if data.has_labels
                                          else _is_float(label_feature))
    if teacher_config is not None:
        _check_teacher_labels(label_with, teacher_config.num_labels, preset, label_feature, regression)
        if label_feature is None:
            import datasets

            label_feature = datasets.Value("float32" if teacher_config.num_labels == 1 else "int64")
    # without gold labels in the source, the teacher labels the originals too
    label_originals = label_with is not None and not data.has_labels
    if label_with is None and regression and data.has_labels:
        warnings.warn(
            f"task {preset.name} is a regression: the new examples get their original's score, which a "
            "changed sentence need not keep; pass --label-with TEACHER if anything trains on these labels "
            "(distillation from the teacher does not)",
            stacklevel=2,
        )

    device = default_device()
    model = load_model(mlm, head="masked-lm").to(device)
    if len(tokenizer) > model.config.vocab_size:
        raise CheckpointError(
            f"the tokenizer of {mlm} has {len(tokenizer)} tokens but the model predicts {model.config.vocab_size}: "
            "they do not belong together; copy the model's own tokenizer into it"
        )
    proposer = CandidateProposer(model, tokenizer, top_k=top_k, max_length=max_length, batch_size=batch_size, device=device)
    teacher = None if label_with is None else load_model(label_with, head="sequence-classification").to(device)

    features = _output_features(rows.features, label, label_feature)
    columns = list(features)
    digest = hashlib.sha256()
    tables = []
    total = data.num_samples
    originals = augmented = duplicates = 0
    examples: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    chunk_size = max(batch_size, 16)
    for begin in range(0, total, chunk_size):
        chunk = rows[begin : begin + chunk_size]
        size = len(chunk[preset.text_columns[0]])
        texts = [tuple(_text(chunk[c][i]) for c in preset.text_columns) for i in range(size)]
        flat = [t for example in texts for t in example]
        slots = proposer.propose(flat)
        width = len(preset.text_columns)
        out_rows: list[dict[str, Any]] = []
        new_rows: list[dict[str, Any]] = []
        for i in range(size):
            original = {c: chunk[c][i] for c in rows.column_names}
            if AUGMENTED_COLUMN not in rows.column_names:
                original[AUGMENTED_COLUMN] = False
            if label_originals:
                original[label] = None  # filled by the teacher below
                new_rows.append(original)
            out_rows.append(original)
            variants = sample_variants(
                texts[i], slots[i * width : (i + 1) * width], n=n, p=replace_prob, rng=example_rng(seed, begin + i)
            )
            duplicates += n - len(variants)
            for variant in variants:
                row = dict(original)
                for column, text in zip(preset.text_columns, variant):
                    row[column] = text if original[column] is not None else None
                row[AUGMENTED_COLUMN] = True
                out_rows.append(row)
                new_rows.append(row)
            if variants and len(examples) < 3:
                examples.append((texts[i], variants[0]))
            augmented += len(variants)
        originals += size
        if teacher is not None and new_rows:
            predictions = _predict(teacher, teacher_tokenizer, new_rows, preset.text_columns, max_length, batch_size, device)
            for row, value in zip(new_rows, predictions):
                row[label] = value
        for row in out_rows:
            digest.update(json.dumps([row[c] for c in columns], ensure_ascii=False).encode())
        tables.append(_table(out_rows, features))
        if progress is not None:
            progress(size, total)

    train = _dataset(tables, features, fingerprint=digest.hexdigest()[:16])
    splits = {SPLIT: len(train), **{name: len(split) for name, split in others.items()}}
    labels = "copied" if label_with is None else f"teacher {label_with}"
    provenance = {
        "format": FORMAT,
        "command": "augment",
        "dataset": str(dataset),
        "task": preset.name,
        "text_columns": list(preset.text_columns),
        "label_column": label,
        "split": SPLIT,
        "max_samples": max_samples,
        "source_sha256": data.fingerprint(),
        "mlm": str(mlm),
        "per_example": n,
        "replace_prob": replace_prob,
        "top_k": top_k,
        "max_length": max_length,
        "seed": seed,
        "labels": "copied" if label_with is None else "teacher",
        "label_with": None if label_with is None else str(label_with),
        "originals": originals,
        "augmented": augmented,
        "duplicates_dropped": duplicates,
        "splits": splits,
        "train_sha256": digest.hexdigest(),
        "versions": _versions(),
    }
    import datasets

    with atomic_directory(out, overwrite=overwrite) as tmp:
        datasets.DatasetDict({SPLIT: train, **others}).save_to_disk(str(tmp))
        (tmp / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n")
    return AugmentResult(
        output=str(out),
        originals=originals,
        augmented=augmented,
        duplicates=duplicates,
        splits=splits,
        labels=labels,
        seconds=time.perf_counter() - started,
        examples=examples,
    )


# ----------------------------------------------------------------------------------------------
# checks, before anything is loaded or written
# ----------------------------------------------------------------------------------------------
def _check_settings(per_example, replace_prob, top_k, max_length, batch_size, max_samples) -> None:
    if per_example is not None and per_example < 1:
        raise GhostifyError(f"--per-example {per_example} makes no new examples; use 1 or more")
    if not 0 < replace_prob <= 1:
        raise GhostifyError(f"--replace-prob {replace_prob} is outside (0, 1]; TinyBERT uses 0.4")
    if top_k < 1:
        raise GhostifyError(f"--top-k {top_k} leaves no candidates; use 1 or more (TinyBERT: 15)")
    if max_length < 8:
        raise GhostifyError(f"--max-length {max_length} is too short; use 8 or more")
    if batch_size < 1:
        raise GhostifyError(f"--batch-size {batch_size} must be at least 1")
    if max_samples is not None and max_samples < 1:
        raise GhostifyError(f"--max-samples {max_samples} must be at least 1")


def _require_masked_lm(mlm) -> None:
    config = load_config(mlm)
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(name.endswith("ForMaskedLM") for name in architectures):
        what = " / ".join(architectures) if architectures else f"{config.model_type} (no architecture named)"
        raise CheckpointError(
            f"{mlm} is a {what} checkpoint without a masked-LM head; --mlm needs a …ForMaskedLM checkpoint "
            "(e.g. bert-base-uncased, roberta-base, distilbert-base-uncased)"
        )


def _require_classifier(teacher):
    config = load_config(teacher)
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        what = " / ".join(architectures) if architectures else config.model_type
        raise CheckpointError(
            f"--label-with {teacher} is a {what} checkpoint without a trained classification head; "
            "pass a model fine-tuned on the task"
        )
    return config


def _checked_tokenizer(source, flag: str):
    """The tokenizer of ``source``; transformers 5 builds an *empty* one from the config when a
    directory has no tokenizer files, so check for the files first."""
    path = Path(source).expanduser()
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(
            f"no tokenizer in {source} (none of tokenizer.json, vocab.txt, ...); {flag} needs one: copy the "
            "tokenizer files of the model it came from into it"
        )
    tokenizer = load_tokenizer(source)
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise CheckpointError(f"the tokenizer of {source} has no vocabulary beyond its special tokens; {flag} needs a real one")
    return tokenizer


def _mlm_tokenizer(mlm):
    tokenizer = _checked_tokenizer(mlm, "--mlm")
    if tokenizer.mask_token is None or tokenizer.mask_token_id is None:
        raise CheckpointError(f"the tokenizer of {mlm} has no mask token; --mlm needs a masked-LM tokenizer")
    if not getattr(tokenizer, "is_fast", False):
        raise CheckpointError(
            f"the tokenizer of {mlm} is not a fast (tokenizers) tokenizer; augmentation needs its word "
            "boundaries and character offsets: save it with tokenizer.json"
        )
    return tokenizer


def _check_teacher_labels(teacher_source, got: int, preset, label_feature, regression: bool) -> None:
    import datasets

    expected = preset.num_labels or None
    if expected is None and isinstance(label_feature, datasets.ClassLabel):
        expected = label_feature.num_classes
    if expected is None and regression:
        expected = 1
    if expected is not None and got != expected:
        kind = "a regression (1 output)" if expected == 1 else f"{expected} labels"
        raise GhostifyError(
            f"--label-with {teacher_source} predicts {got} label(s) but task {preset.name} has {kind}; "
            "label with a model fine-tuned on this task"
        )


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------
def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _is_float(feature) -> bool:
    return getattr(feature, "dtype", "").startswith("float")


def _other_splits(dataset: str, preset) -> dict[str, Any]:
    """Every split of the source but ``train``, unchanged (validation for evaluation, test, ...)."""
    import datasets

    path = str(Path(dataset).expanduser()) if Path(dataset).expanduser().exists() else dataset
    try:
        if Path(path).is_dir() and (Path(path) / "dataset_dict.json").is_file():
            full = datasets.load_from_disk(path)
        else:
            full = datasets.load_dataset(path, preset.dataset_config)
    except (FileNotFoundError, ValueError, KeyError, ConnectionError, OSError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load the splits of dataset {dataset} ({preset.name}): {message}") from exc
    others = {name: split for name, split in full.items() if name != SPLIT}
    if preset.validation_split not in others and preset.name != "custom":
        warnings.warn(
            f"dataset {dataset} has no {preset.validation_split!r} split: the output holds no data to evaluate on",
            stacklevel=3,
        )
    return others


def _output_features(source, label: str, label_feature):
    import datasets

    features = dict(source)
    if label_feature is not None:
        features[label] = label_feature
    features.setdefault(AUGMENTED_COLUMN, datasets.Value("bool"))
    return datasets.Features(features)


def _table(rows: list[dict[str, Any]], features):
    import pyarrow as pa

    columns = {name: [row[name] for row in rows] for name in features}
    return pa.Table.from_pydict(features.encode_batch(columns), schema=features.arrow_schema)


def _dataset(tables, features, *, fingerprint: str):
    """One in-memory Dataset with a content-derived fingerprint: ``Dataset.from_dict`` would give a
    random one, and the saved directory would then differ from run to run."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    table = pa.concat_tables(tables) if tables else features.arrow_schema.empty_table()
    info = datasets.DatasetInfo(features=features, description="ghostify augment: originals and their augmented versions")
    return datasets.Dataset(InMemoryTable(table), info=info, split=datasets.NamedSplit(SPLIT), fingerprint=fingerprint)


@torch.inference_mode()
def _predict(model, tokenizer, rows, text_columns, max_length: int, batch_size: int, device) -> list:
    """The teacher's label for each row: the argmax class, or the value for a regression."""
    order = sorted(range(len(rows)), key=lambda i: (-sum(len(_text(rows[i][c])) for c in text_columns), i))
    predictions: list[Any] = [None] * len(rows)
    for begin in range(0, len(order), batch_size):
        batch = order[begin : begin + batch_size]
        texts = [[_text(rows[i][c]) for i in batch] for c in text_columns]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        logits = model(**{k: v.to(device) for k, v in encoded.items()}).logits.float().cpu()
        if model.config.num_labels == 1:
            values = logits[:, 0].tolist()
        else:
            values = logits.argmax(dim=-1).tolist()
        for i, value in zip(batch, values):
            predictions[i] = value
    return predictions


def _versions() -> dict[str, str]:
    import datasets
    import transformers

    return {
        "ghostify": __version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "datasets": datasets.__version__,
    }
