"""``ghostify augment``: TinyBERT-style augmentation of a task's training data with a masked LM."""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..checkpoint import load_model
from ..data import label_kind, load_split, resolve_task
from ..device import default_device
from ..errors import CheckpointError, DataError
from ..files import atomic_directory, check_output_dir
from ..flatten import checks_arguments
from ..settings import AugmentDefaults, DataSettings
from ..tasks import kind_for
from ..tokenization import check_max_length
from .inputs import check_settings, checked_tokenizer, mlm_tokenizer, require_masked_lm
from .output import (
    AUGMENTED_COLUMN,
    FORMAT,
    PROVENANCE_NAME,
    SPLIT,
    arrow_table,
    in_memory_dataset,
    is_float,
    other_splits,
    output_features,
    text_of,
    versions,
)
from .proposer import CandidateProposer
from .sampling import example_rng, sample_variants
from .teacher import check_teacher_labels, predict_labels, require_classifier
from .words import default_per_example


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
    dataset: str = DataSettings.dataset,
    task: str | None = None,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    per_example: int | None = None,
    replace_prob: float = AugmentDefaults.replace_prob,
    top_k: int = AugmentDefaults.top_k,
    label_with: str | os.PathLike | None = None,
    max_samples: int | None = None,
    max_length: int = DataSettings.max_length,
    batch_size: int = AugmentDefaults.batch_size,
    seed: int = AugmentDefaults.seed,
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
    _check_arguments(per_example=per_example, replace_prob=replace_prob, top_k=top_k, max_length=max_length,
                     batch_size=batch_size, max_samples=max_samples)
    out = check_output_dir(output, overwrite=overwrite, inputs=(("--dataset", dataset), ("--mlm", mlm), ("--label-with", label_with)))
    check_max_length(max_length, mlm, label_with)
    preset = resolve_task(task, text_columns=text_columns, label_column=label_column)
    refusal = kind_for(preset).augmentation_refusal()
    if refusal:
        raise DataError(f"cannot augment task {preset.name}: {refusal}")
    n = per_example if per_example is not None else default_per_example(task)

    require_masked_lm(mlm)
    tokenizer = mlm_tokenizer(mlm)
    teacher_config = teacher_tokenizer = None
    if label_with is not None:
        teacher_config = require_classifier(label_with)
        teacher_tokenizer = checked_tokenizer(label_with, "--label-with")

    data = load_split(dataset, preset, SPLIT, max_samples=max_samples, seed=seed, require_labels=False)
    others = other_splits(dataset, preset)
    rows = data.rows
    label = preset.label_column
    has_label_column = label in rows.column_names
    label_feature = rows.features[label] if has_label_column else None
    # the one label rule of every command (ghostify.data.label_kind); without labels, the column's type
    regression = preset.is_regression or (label_kind(rows, label, dataset=str(dataset)).regression if data.has_labels
                                          else is_float(label_feature))
    if teacher_config is not None:
        check_teacher_labels(label_with, teacher_config.num_labels, preset, label_feature, regression)
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

    features = output_features(rows.features, label, label_feature)
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
        texts = [tuple(text_of(chunk[c][i]) for c in preset.text_columns) for i in range(size)]
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
            predictions = predict_labels(teacher, teacher_tokenizer, new_rows, preset.text_columns, max_length, batch_size, device)
            for row, value in zip(new_rows, predictions):
                row[label] = value
        for row in out_rows:
            digest.update(json.dumps([row[c] for c in columns], ensure_ascii=False).encode())
        tables.append(arrow_table(out_rows, features))
        if progress is not None:
            progress(size, total)

    train = in_memory_dataset(tables, features, fingerprint=digest.hexdigest()[:16])
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
        "versions": versions(),
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


def _check_arguments(*, per_example: int | None = None, replace_prob: float = AugmentDefaults.replace_prob,
                     top_k: int = AugmentDefaults.top_k, max_length: int = DataSettings.max_length,
                     batch_size: int = AugmentDefaults.batch_size, max_samples: int | None = None, **_: object) -> None:
    """What :func:`augment` refuses of its arguments before reading anything."""
    check_settings(per_example, replace_prob, top_k, max_length, batch_size, max_samples)


checks_arguments(augment, _check_arguments)
