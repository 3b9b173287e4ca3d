"""The dataset directory ``augment`` writes: the augmented ``train`` split built as Arrow tables with
a content-derived fingerprint (so the same command gives a byte-identical directory), the other
splits copied unchanged, and the provenance record."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from ..errors import DataError
from ..version import __version__

SPLIT = "train"  # only training data is augmented; every other split is copied unchanged
PROVENANCE_NAME = "augment.json"
AUGMENTED_COLUMN = "augmented"
FORMAT = 1


def text_of(value) -> str:
    return value if isinstance(value, str) else ""


def is_float(feature) -> bool:
    return getattr(feature, "dtype", "").startswith("float")


def other_splits(dataset: str, preset) -> dict[str, Any]:
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


def output_features(source, label: str, label_feature):
    import datasets

    features = dict(source)
    if label_feature is not None:
        features[label] = label_feature
    features.setdefault(AUGMENTED_COLUMN, datasets.Value("bool"))
    return datasets.Features(features)


def arrow_table(rows: list[dict[str, Any]], features):
    import pyarrow as pa

    columns = {name: [row[name] for row in rows] for name in features}
    return pa.Table.from_pydict(features.encode_batch(columns), schema=features.arrow_schema)


def in_memory_dataset(tables, features, *, fingerprint: str):
    """One in-memory Dataset with a content-derived fingerprint: ``Dataset.from_dict`` would give a
    random one, and the saved directory would then differ from run to run."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    table = pa.concat_tables(tables) if tables else features.arrow_schema.empty_table()
    info = datasets.DatasetInfo(features=features, description="ghostify augment: originals and their augmented versions")
    return datasets.Dataset(InMemoryTable(table), info=info, split=datasets.NamedSplit(SPLIT), fingerprint=fingerprint)


def versions() -> dict[str, str]:
    import datasets
    import transformers

    return {
        "ghostify": __version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "datasets": datasets.__version__,
    }
