"""Loading a task's split, choosing a reproducible subset, tokenising and batching it."""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import DataError
from .checks import usable_rows
from .labels import label_ids
from .readers import DATA_FILES, FileRows, check_text_file, is_data_file, read_data_file
from .tasks import TaskPreset

#: the share of a single data file held out as its validation split when no --validation-file is given
HELD_OUT = 0.1
#: the hold-out draws with this seed, never a command's --seed: every command of a pipeline
#: (importance, finetune, distill, eval) must agree on which rows are validation rows
HELD_OUT_SEED = 0


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
    validation_file: str | None = None,
    without_labels: str | None = None,
) -> TaskData:
    """Load ``split`` of ``dataset`` for ``task``; a seeded random subset of ``max_samples``.
    ``validation_file``: a data file that is the task's validation split instead of the dataset's.
    ``without_labels``: how the calling command runs without labels, said when they are missing
    (``importance``: "score without labels with --label-free"); a command that needs them names none."""
    import datasets

    datasets.disable_progress_bars()
    check_dataset(dataset)
    if validation_file is not None and split == task.validation_split:
        dataset, split = validation_file, "train"  # the whole file
        rows, place = _read_validation_file(validation_file)
    else:
        rows, place = _read(dataset, task, split, held_out=validation_file is None)
    if not task.input_columns:
        task = replace(task, text_columns=(_only_text_column(rows, task, dataset),))
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
        other = f", or {without_labels}" if without_labels else ""
        raise DataError(
            f"split {split!r} of {dataset} has no labels in column {target!r} "
            f"(columns: {', '.join(rows.column_names)}); set {flag}{other}"
        )
    rows = usable_rows(rows, task, dataset=dataset, split=split, labels=has_labels, place=place)
    if max_samples is not None and max_samples < len(rows):
        rows = rows.shuffle(seed=seed).select(range(max_samples))
    return TaskData(dataset=dataset, split=split, task=task, rows=rows, has_labels=has_labels)


def load_unlabelled(path: str, task: TaskPreset) -> TaskData:
    """Every row of a user's own in-domain text (``distill --unlabelled``), labels unread: a data file with the
    task's input columns (.csv, .tsv, .json, .jsonl, .parquet), or for a task that reads one column a .txt
    file of one text per line (for token classification, its words split at white space)."""
    import datasets

    source = Path(path).expanduser()
    columns = task.input_columns
    if not source.is_file():
        raise DataError(f"--unlabelled {path} is not a file; give a .txt file of one text per line, or a data file "
                        f"(.csv, .tsv, .json, .jsonl, .parquet) with the column(s) {', '.join(columns)}")
    if source.suffix == ".txt":
        if len(columns) != 1:
            raise DataError(f"--unlabelled {path} is a text file of one text per line, but task {task.name} reads "
                            f"{len(columns)} columns ({', '.join(columns)}): give a data file (.csv, .jsonl, ...) "
                            "with those columns")
        texts = [row["text"] for row in _text_lines(source, path, "train")]
        values = [text.split() for text in texts] if task.kind == "tokens" else texts
        rows = datasets.Dataset.from_dict({columns[0]: values})
        place: Callable[[int], str] = lambda i: f"line {i + 1} of {path}"  # noqa: E731
    elif source.suffix.lower() in DATA_FILES:
        read = read_data_file(source, path)
        rows, place = read.rows, read.place
        missing = [c for c in columns if c not in rows.column_names]
        if missing:
            raise DataError(f"--unlabelled {path} has no column {missing[0]!r} (columns: {', '.join(rows.column_names)}"
                            f"); task {task.name} reads {', '.join(columns)}")
        rows = rows.select_columns(list(columns))
    else:
        raise DataError(f"--unlabelled {path}: a {source.suffix or 'file without an extension'} is not a kind of file "
                        "ghostify reads; give .txt (one text per line), .csv, .tsv, .json, .jsonl or .parquet")
    rows = usable_rows(rows, task, dataset=path, split="train", labels=False, place=place)
    return TaskData(dataset=path, split="train", task=task, rows=rows, has_labels=False)


def _read(dataset: str, task: TaskPreset, split: str, *, held_out: bool = True) -> tuple[Any, Callable[[int], str]]:
    """The split as a datasets.Dataset, and where its row ``i`` is, in words. A ``save_to_disk``
    directory is read into memory: a dataset mapped from its own files would write its ``.map()``
    caches beside them, into the input (datasets loaded by ``load_dataset`` live in datasets' own
    cache, where their caches go too). A single data file is split ``train`` (``held_out``: less the
    rows held out as ``validation``); its rows are named by their place in the file."""
    import datasets

    path = Path(dataset).expanduser()
    try:
        if is_data_file(dataset):
            read = _file_split(path, dataset, task, split, held_out=held_out)
            return read.rows, read.place
        if path.is_dir() and (path / "dataset_dict.json").is_file():
            rows = datasets.Dataset.load_from_disk(str(path / _saved_split(path, dataset, split)), keep_in_memory=True)
        elif path.is_file() and path.suffix == ".txt":  # one text per line: column "text", split train
            rows = _text_lines(path, dataset, split)
        else:
            rows = datasets.load_dataset(str(path) if path.exists() else dataset, task.dataset_config, split=split)
    except (FileNotFoundError, ValueError, KeyError, ConnectionError, OSError, datasets.exceptions.DatasetsError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load split {split!r} of dataset {dataset} ({task.name}): {message}") from exc
    return rows, lambda i: f"row {i} of split {split!r} of {dataset}"


def _file_split(path: Path, dataset: str, task: TaskPreset, split: str, *, held_out: bool) -> FileRows:
    """``split`` of a single data file: ``train`` is the file (less the held-out rows unless a
    validation file was given), the task's validation split the rows held out."""
    validation = task.validation_split
    if split not in ("train", validation):
        raise DataError(f"{dataset} is a single data file: its splits are train and {validation} (held out), "
                        f"not {split!r}; choose one of them with --split")
    read = read_data_file(path, dataset)
    if not held_out:
        return read
    count_rows = len(read.rows)
    if count_rows < 2:
        raise DataError(f"{dataset} has {count_rows} row(s): too few to hold out a validation split; add rows "
                        "or give --validation-file")
    order = list(range(count_rows))
    random.Random(HELD_OUT_SEED).shuffle(order)
    count = max(1, round(HELD_OUT * count_rows))
    if split == validation:
        warnings.warn(f"{dataset} is a single data file and no --validation-file was given: its validation split is "
                      f"{count} of its {count_rows} rows ({HELD_OUT:.0%}, held out with seed {HELD_OUT_SEED}; train is "
                      "the rest)", UserWarning, stacklevel=4)
    return read.select(sorted(order[:count] if split == validation else order[count:]))


def _only_text_column(rows: Any, task: TaskPreset, dataset: str) -> str:
    """The text column of a task that names none: the one column of strings besides the label, said in
    a warning; refused when there are none or several."""
    texts = [name for name, feature in rows.features.items()
             if name != task.target_column and getattr(feature, "dtype", None) in ("string", "large_string")]
    if len(texts) != 1:
        found = f"its text columns are {', '.join(texts)}" if texts else "it has no column of text"
        raise DataError(f"task {task.name} needs its text column(s): set --text-columns ({found}; columns of "
                        f"{dataset}: {', '.join(rows.column_names)})")
    warnings.warn(f"{dataset}: the text is column {texts[0]!r}, its only column of text besides the label "
                  f"{task.target_column!r} (give --text-columns to choose another)", UserWarning, stacklevel=3)
    return texts[0]


def check_dataset(dataset: str) -> None:
    """Refuse a --dataset named by a local path that does not exist (a name is a hub id). Light: the
    command line calls it before torch loads."""
    if dataset.startswith((".", "/", "~")) and not Path(dataset).expanduser().exists():
        raise DataError(f"dataset directory {dataset} does not exist; check --dataset")


def check_validation_file(validation_file: str) -> Path:
    """The --validation-file, refused unless it is a data file of a kind ghostify reads (light, as above)."""
    path = Path(validation_file).expanduser()
    if not path.is_file():
        raise DataError(f"--validation-file {validation_file} is not a file; give a "
                        f"{', '.join(DATA_FILES)} file of validation rows")
    if path.suffix.lower() not in DATA_FILES:
        raise DataError(f"--validation-file {validation_file}: unknown kind of data file {path.suffix or '(no extension)'!r}; "
                        f"give a {', '.join(DATA_FILES)} file")
    return path


def _read_validation_file(validation_file: str) -> tuple[Any, Callable[[int], str]]:
    path = check_validation_file(validation_file)
    read = read_data_file(path, validation_file)
    return read.rows, read.place


def _saved_split(path: Path, dataset: str, split: str) -> str:
    """``split`` of a ``DatasetDict.save_to_disk`` directory, which must list it."""
    try:
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path / 'dataset_dict.json'} is not a datasets split list ({exc}); save the dataset again "
                        "with DatasetDict.save_to_disk") from exc
    if split not in splits:
        raise DataError(f"dataset {dataset} has no split {split!r} (its splits: {', '.join(map(str, splits))}); "
                        f"save it with a {split!r} split, or name another with --split")
    return split


def _text_lines(path: Path, dataset: str, split: str):
    """The non-blank lines of a UTF-8 text file, as column ``text`` of split ``train``."""
    import datasets

    if split != "train":
        raise DataError(f"{dataset} is a plain text file: it has only a train split, not {split!r}")
    check_text_file(path, dataset)
    rows = datasets.load_dataset("text", data_files={"train": str(path)}, split="train")
    lines = len(rows)
    rows = rows.filter(lambda row: bool(row["text"].strip()))
    if len(rows) == 0:
        raise DataError(f"{dataset} has no text: its {lines} lines are all blank; give one text per line")
    return rows


def _labels_present(rows, column: str) -> bool:
    head = rows.select(range(min(len(rows), 256)))[column]
    return any(label is not None and label != -1 for label in head)


#: the column of a windowed row that says which text (row of the split) it is a window of
DOCUMENT = "document"


def tokenize(data: TaskData, tokenizer, *, max_length: int = 128, stride: int | None = None,
             documents: bool = False):
    """The rows as token ids (and ``labels``), unpadded: batches are padded dynamically.
    ``stride`` (a fast tokenizer's overflow): a text longer than ``max_length`` becomes windows of
    ``max_length`` tokens overlapping by ``stride``, each a row with its text's label (and with
    ``documents``, the text's row number in column ``document``); None truncates it."""
    columns = data.task.text_columns
    label_column = data.task.label_column
    regression = data.task.is_regression
    names, where = data.task.label_names, f"split {data.split!r} of {data.dataset}"
    windows = {} if stride is None else {"stride": stride, "return_overflowing_tokens": True}

    def encode(chunk, ids):
        encoded = tokenizer(*[chunk[c] for c in columns], truncation=True, max_length=max_length, **windows)
        source = encoded.pop("overflow_to_sample_mapping", None)  # the text of each window
        source = range(len(ids)) if source is None else source
        if data.has_labels:
            labels = chunk[label_column]
            labels = ([float(x) for x in labels] if regression
                      else label_ids(labels, names, column=label_column, where=where))
            encoded["labels"] = [labels[i] for i in source]
        if documents:
            encoded[DOCUMENT] = [ids[i] for i in source]
        return encoded

    return data.rows.map(encode, batched=True, with_indices=True, remove_columns=data.rows.column_names, desc=None)


def padding_collator(tokenizer):
    """Pads each batch to its longest sequence (dynamic padding)."""
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer, return_tensors="pt")
