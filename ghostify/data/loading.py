"""Loading a task's split, choosing a reproducible subset, tokenising and batching it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError
from .tasks import TaskPreset


@dataclass
class TaskData:
    """A tokenisable subset of one split, with what identifies it."""

    dataset: str
    split: str
    task: TaskPreset
    rows: Any  # a datasets.Dataset
    has_labels: bool

    @property
    def num_samples(self) -> int:
        return len(self.rows)

    def fingerprint(self) -> str:
        """sha256 over the selected texts (and labels), so scores can be traced to their data."""
        digest = hashlib.sha256()
        columns = [*self.task.input_columns] + ([self.task.target_column] if self.has_labels else [])
        for row in self.rows.select_columns(columns):
            digest.update(json.dumps([row[c] for c in columns], ensure_ascii=False).encode())
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "task": self.task.name,
            "split": self.split,
            "samples": self.num_samples,
            "sha256": self.fingerprint(),
        }


def load_split(
    dataset: str,
    task: TaskPreset,
    split: str,
    *,
    max_samples: int | None = None,
    seed: int = 0,
    require_labels: bool = True,
) -> TaskData:
    """Load ``split`` of ``dataset`` for ``task``; a seeded random subset of ``max_samples``."""
    import datasets

    datasets.disable_progress_bars()
    if dataset.startswith((".", "/", "~")) and not Path(dataset).expanduser().exists():
        raise DataError(f"dataset directory {dataset} does not exist; check --dataset")
    try:
        path = str(Path(dataset).expanduser()) if Path(dataset).expanduser().exists() else dataset
        if Path(path).is_dir() and (Path(path) / "dataset_dict.json").is_file():
            rows = datasets.load_from_disk(path)[split]
        elif Path(path).is_file() and path.endswith(".txt"):  # one text per line: column "text", split train
            if split != "train":
                raise DataError(f"{dataset} is a plain text file: it has only a train split, not {split!r}")
            rows = datasets.load_dataset("text", data_files={"train": path}, split="train")
            rows = rows.filter(lambda row: bool(row["text"].strip()))
        else:
            rows = datasets.load_dataset(path, task.dataset_config, split=split)
    except (FileNotFoundError, ValueError, KeyError, ConnectionError, OSError, datasets.exceptions.DatasetsError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load split {split!r} of dataset {dataset} ({task.name}): {message}") from exc
    if not task.input_columns:
        raise DataError(f"task {task.name} needs its text column(s): set --text-columns "
                        f"(columns of {dataset}: {', '.join(rows.column_names)})")
    missing = [c for c in task.input_columns if c not in rows.column_names]
    if missing:
        flag = {"tokens": "--tokens-column", "qa": "--question-column / --context-column"}.get(task.kind, "--text-columns")
        raise DataError(
            f"dataset {dataset} has no column {missing[0]!r} (columns: {', '.join(rows.column_names)}); set {flag}"
        )
    target = task.target_column
    has_labels = target in rows.column_names and (task.kind != "classification" or _labels_present(rows, target))
    if require_labels and not has_labels:
        flag = {"tokens": "--tags-column", "qa": "--answers-column"}.get(task.kind, "--label-column")
        raise DataError(
            f"split {split!r} of {dataset} has no labels in column {target!r}; "
            f"score without labels with --label-free, or set {flag}"
        )
    if max_samples is not None and max_samples < len(rows):
        rows = rows.shuffle(seed=seed).select(range(max_samples))
    return TaskData(dataset=dataset, split=split, task=task, rows=rows, has_labels=has_labels)


def _labels_present(rows, column: str) -> bool:
    head = rows.select(range(min(len(rows), 256)))[column]
    return any(label is not None and label != -1 for label in head)


def tokenize(data: TaskData, tokenizer, *, max_length: int = 128):
    """The rows as token ids (and ``labels``), unpadded: batches are padded dynamically."""
    columns = data.task.text_columns
    label_column = data.task.label_column
    regression = data.task.is_regression

    def encode(chunk):
        encoded = tokenizer(*[chunk[c] for c in columns], truncation=True, max_length=max_length)
        if data.has_labels:
            encoded["labels"] = [float(x) for x in chunk[label_column]] if regression else [int(x) for x in chunk[label_column]]
        return encoded

    return data.rows.map(encode, batched=True, remove_columns=data.rows.column_names, desc=None)


def padding_collator(tokenizer):
    """Pads each batch to its longest sequence (dynamic padding)."""
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer, return_tensors="pt")
