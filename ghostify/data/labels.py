"""What a label column holds: class ids or regression scores, decided once for every command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import DataError

#: a missing label (GLUE's unlabelled test splits use -1)
MISSING = -1


@dataclass(frozen=True)
class LabelKind:
    regression: bool
    num_labels: int  # 1 for a regression


def label_kind(rows: Any, column: str, *, dataset: str = "the dataset") -> LabelKind:
    """Classification or regression, from the whole ``column`` of ``rows`` (a datasets.Dataset).

    A ``ClassLabel`` or integer column is classification; a float column is a regression when
    any label is not a whole number (0.0/1.0 labels stored as floats are still classes). Every
    label counts, not a prefix: a regression whose first scores happen to be whole numbers is
    still a regression."""
    import datasets

    feature = rows.features.get(column) if getattr(rows, "features", None) is not None else None
    if isinstance(feature, datasets.ClassLabel):
        return LabelKind(False, max(2, feature.num_classes))
    dtype = str(getattr(feature, "dtype", "") or "")
    values = [v for v in rows[column] if v is not None]
    if not dtype:  # no schema (a plain list): judge by the values themselves
        dtype = "float" if any(isinstance(v, float) for v in values) else "int" if values else ""
    if dtype.startswith(("int", "uint", "bool")):
        return LabelKind(False, _classes(values))
    if dtype.startswith("float"):
        if any(not float(v).is_integer() for v in values):
            return LabelKind(True, 1)
        return LabelKind(False, _classes(values))
    raise DataError(
        f"label column {column!r} of {dataset} holds {dtype or 'no'} values; ghostify needs integer class ids "
        "(or a ClassLabel) or float scores for a regression: convert the column or set --label-column"
    )


def _classes(values: list[Any]) -> int:
    ids = [int(v) for v in values if int(v) != MISSING]
    negative = [i for i in ids if i < 0]
    if negative:
        raise DataError(f"label {negative[0]} is negative; class labels are ids 0, 1, 2, ... (-1 marks a missing label)")
    return max(2, max(ids) + 1) if ids else 2
