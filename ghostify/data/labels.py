"""What a label column holds: class ids (or class names) or regression scores, decided once for
every command; and the names of the classes, which a new head keeps as ``id2label``."""

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
    #: the class names, by id (a ClassLabel's, or the sorted strings of a column of names); None: ids only
    names: tuple[str, ...] | None = None
    #: the column holds the names themselves (strings), not ids
    strings: bool = False


def label_kind(rows: Any, column: str, *, dataset: str = "the dataset") -> LabelKind:
    """Classification or regression, from the whole ``column`` of ``rows`` (a datasets.Dataset).

    A ``ClassLabel`` or integer column is classification; a float column is a regression when
    any label is not a whole number (0.0/1.0 labels stored as floats are still classes). Every
    label counts, not a prefix: a regression whose first scores happen to be whole numbers is
    still a regression."""
    import datasets

    feature = rows.features.get(column) if getattr(rows, "features", None) is not None else None
    if isinstance(feature, datasets.ClassLabel):
        return LabelKind(False, max(2, feature.num_classes), tuple(feature.names))
    dtype = str(getattr(feature, "dtype", "") or "")
    values = [v for v in rows[column] if v is not None]
    if not dtype:  # no schema (a plain list, a nested column): judge by the values themselves
        dtype = _value_type(values)
    if dtype in ("string", "large_string"):  # class names: ids in sorted order, the names kept
        names = tuple(sorted({str(v) for v in values}))
        return LabelKind(False, max(2, len(names)), names, strings=True)
    if dtype.startswith(("int", "uint", "bool")):
        return LabelKind(False, _classes(values))
    if dtype.startswith("float"):
        if any(not float(v).is_integer() for v in values):
            return LabelKind(True, 1)
        return LabelKind(False, _classes(values))
    raise DataError(
        f"label column {column!r} of {dataset} holds {dtype or 'no'} values; ghostify needs class ids, class names "
        "(strings, or a ClassLabel) or float scores for a regression: convert the column or set --label-column"
    )


def _value_type(values: list[Any]) -> str:
    # one string among numbers makes every label a class name ("0", "1", "pos"), as a CSV file reads them
    if values and any(isinstance(v, str) for v in values) and all(isinstance(v, (str, int, float)) for v in values):
        return "string"
    if values and all(isinstance(v, (int, float)) for v in values):
        return "float" if any(isinstance(v, float) for v in values) else "int"
    return type(next((v for v in values if not isinstance(v, (int, float, str))), values[0])).__name__ if values else ""


def _classes(values: list[Any]) -> int:
    ids = [int(v) for v in values if int(v) != MISSING]
    negative = [i for i in ids if i < 0]
    if negative:
        raise DataError(f"label {negative[0]} is negative; class labels are ids 0, 1, 2, ... (-1 marks a missing label)")
    return max(2, max(ids) + 1) if ids else 2


def model_label_names(config: Any) -> tuple[str, ...] | None:
    """The class names a checkpoint's head was trained with (``id2label``), or None when it has
    only transformers' placeholders (``LABEL_0``, ...)."""
    id2label = getattr(config, "id2label", None) or {}
    names = tuple(str(id2label[i]) for i in sorted(id2label, key=int))
    return None if not names or names == tuple(f"LABEL_{i}" for i in range(len(names))) else names


def label_ids(values: list[Any], names: tuple[str, ...] | None, *, column: str, where: str) -> list[int]:
    """Class ids for ``values``: class names by their position in ``names``, ids as they are."""
    if not any(isinstance(v, str) for v in values):
        return [int(v) for v in values]
    index = {name: i for i, name in enumerate(names or ())}
    unknown = next((v for v in values if str(v) not in index), None)
    if unknown is not None:
        known = ", ".join(repr(n) for n in (names or ())) or "none (the labels are ids)"
        raise DataError(f"label {unknown!r} in column {column!r} of {where} is not a class of this model (its classes: "
                        f"{known}); use the labels it was fine-tuned with")
    return [index[str(v)] for v in values]
