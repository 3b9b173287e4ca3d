"""The readers of local data files, one per kind: ``.csv``/``.tsv``, ``.json``/``.jsonl`` and
``.parquet`` (and the check of every text file, ``.txt`` included). Each reads the whole file into
memory (nothing is written beside it), and a file that cannot be read is one ``DataError`` naming
the file and, where the reader knows it, the line. Every reader also says where each of its rows is
in the file (``FileRows.place``), so that a bad cell found later is named as a person counts rows
in that file."""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError

#: a single data file as --dataset (or --validation-file): its extension -> the reader's kind of file
DATA_FILES: dict[str, str] = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "jsonl", ".parquet": "parquet"}
#: what each kind of data file holds (said when one is empty)
HOLDS = {"csv": "a header line naming its columns, then one row per line",
         "tsv": "a header line naming its columns, then one row per line",
         "json": "a JSON list of row objects, or one object per line", "jsonl": "one JSON object per line",
         "parquet": "a table"}


@dataclass(frozen=True)
class FileRows:
    """A data file's rows (a datasets.Dataset) and where row ``i`` is in the file, in words."""

    rows: Any
    place: Callable[[int], str]

    def select(self, indices: list[int]) -> "FileRows":
        """The rows at ``indices`` (in that order), each still named by its place in the file."""
        return FileRows(self.rows.select(indices), lambda i: self.place(indices[i]))


def is_data_file(dataset: str) -> bool:
    """Whether ``--dataset`` names one data file of a kind ghostify reads (not a directory or hub id)."""
    path = Path(dataset).expanduser()
    return path.suffix.lower() in DATA_FILES and path.is_file()


def read_data_file(path: Path, name: str) -> FileRows:
    """The rows of the data file ``path`` (``name``: as the user gave it), read by its extension."""
    kind = DATA_FILES[path.suffix.lower()]
    if path.stat().st_size == 0:
        raise DataError(f"{name} is empty (0 bytes); a {path.suffix} data file holds {HOLDS[kind]}")
    if kind == "parquet":
        return _read_parquet(path, name)
    check_text_file(path, name, fix=f"save it as UTF-8 (a {path.suffix} data file is UTF-8 text)")
    if kind in ("csv", "tsv"):
        return _read_csv(path, name, "\t" if kind == "tsv" else ",")
    return _read_json(path, name, lines=kind == "jsonl")


# ----------------------------------------------------------------------------------------------
# CSV and TSV
# ----------------------------------------------------------------------------------------------
def _read_csv(path: Path, name: str, delimiter: str) -> FileRows:
    """The rows below the header line. pandas reads the whole file, so a column that mixes numbers
    and words is words throughout (``0``, ``1`` and ``pos`` are the labels "0", "1" and "pos")."""
    import datasets
    import pandas

    what = "TSV" if delimiter == "\t" else "CSV"
    try:
        frame = pandas.read_csv(path, sep=delimiter, encoding="utf-8", low_memory=False)
    except pandas.errors.EmptyDataError as exc:
        raise DataError(f"{name} has no header line: its lines are all blank; a {what} file starts with the names of "
                        "its columns") from exc
    except (pandas.errors.ParserError, ValueError) as exc:
        raise DataError(f"cannot read {name} as {what}: {_first_line(exc)}; every row needs as many cells as the "
                        "header, and a cell that holds the delimiter or a line break must be quoted") from exc
    if len(frame) == 0:
        raise DataError(f"{name} has a header ({', '.join(map(str, frame.columns))}) but no rows")
    rows = datasets.Dataset.from_pandas(frame, preserve_index=False)
    return FileRows(rows, lambda i: f"row {i + 1} of {name} (counting from 1 below the header)")


# ----------------------------------------------------------------------------------------------
# JSON and JSON lines
# ----------------------------------------------------------------------------------------------
def _read_json(path: Path, name: str, *, lines: bool) -> FileRows:
    """One JSON object per line (``.jsonl``; a ``.json`` file too unless it is one JSON list of
    objects). A column whose values mix numbers and strings is read as strings, as a CSV file's is."""
    text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first row
    if not lines and text.lstrip().startswith("["):
        items, unit = _json_list(text, name), "item"
        numbers = list(range(1, len(items) + 1))
    else:
        items, numbers, unit = [], [], "line"
        # JSON strings may hold U+2028 and other line separators unescaped: only \n ends a line
        pieces = text.split("\n")
        if pieces[-1] == "":
            pieces.pop()  # the newline that ends the last line starts no line of its own
        for number, piece in enumerate(pieces, 1):
            if not piece.strip():
                continue
            try:
                item = json.loads(piece)
            except json.JSONDecodeError as exc:
                raise DataError(f"line {number} of {name} is not valid JSON ({exc.msg} at column {exc.colno}); give "
                                "one JSON object per line") from exc
            _check_object(item, f"line {number} of {name}", "give one JSON object per line")
            items.append(item)
            numbers.append(number)
        if not items:
            raise DataError(f"{name} has no rows: its {len(pieces)} lines are all blank; give one JSON object per line")

    def where(i: int) -> str:
        return f"{unit} {numbers[i]}"

    return FileRows(_dataset(items, name, where), lambda i: f"{where(i)} of {name}")


def _json_list(text: str, name: str) -> list[dict[str, Any]]:
    """The objects of a ``.json`` file that is one JSON list."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; give a JSON "
                        "list of row objects, or one object per line") from exc
    if not items:
        raise DataError(f"{name} is an empty list: it has no rows")
    for number, item in enumerate(items, 1):
        _check_object(item, f"item {number} of the list in {name}", "give a list of row objects")
    return items


def _check_object(item: Any, where: str, fix: str) -> None:
    if not isinstance(item, dict):
        raise DataError(f"{where} is a JSON {_json_kind(item)}, not an object of columns ({{\"column\": value, ...}}); "
                        f"{fix}")


def _dataset(items: list[dict[str, Any]], name: str, where: Callable[[int], str]):
    """``items`` as a datasets.Dataset: every key of any row is a column (None where a row lacks it);
    ``where(i)``: where item ``i`` is in the file ("line 7")."""
    import datasets
    import pyarrow

    columns: dict[str, list[Any]] = {key: [] for item in items for key in item}
    for item in items:
        for key, values in columns.items():
            values.append(item.get(key))
    columns = {key: _one_kind(key, values, name, where) for key, values in columns.items()}
    try:
        return datasets.Dataset.from_dict(columns)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, TypeError, ValueError) as exc:
        raise DataError(f"cannot read {name}: {_first_line(exc)}; give every row's column the same kind of "
                        "value") from exc


def _one_kind(column: str, values: list[Any], name: str, where: Callable[[int], str]) -> list[Any]:
    """``values`` of one column, of one kind: numbers mixed with strings become strings (the rule a
    CSV file follows); lists or objects mixed with single values are refused in one line."""
    first: dict[str, int] = {}
    for i, value in enumerate(values):
        if value is not None:
            first.setdefault(_json_kind(value), i)
    if "string" in first and set(first) <= {"string", "number", "boolean"}:
        return [value if value is None or isinstance(value, str) else str(value) for value in values]
    nested = [kind for kind in first if kind in ("list", "object")]
    if nested and len(first) > 1:
        other = next(kind for kind in first if kind != nested[0])
        a, b = sorted((first[nested[0]], first[other]))
        raise DataError(f"column {column!r} of {name} mixes kinds of value: {where(a)} holds a "
                        f"{_json_kind(values[a])}, {where(b)} a {_json_kind(values[b])}; give every row the same kind "
                        "of value")
    return values


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else type(value).__name__


# ----------------------------------------------------------------------------------------------
# parquet
# ----------------------------------------------------------------------------------------------
def _read_parquet(path: Path, name: str) -> FileRows:
    """The table, with the column types (and a datasets ``ClassLabel``'s names) its schema keeps."""
    import datasets
    import pyarrow
    import pyarrow.parquet as parquet
    from datasets.table import InMemoryTable

    try:
        table = parquet.read_table(path)
    except (pyarrow.ArrowException, OSError) as exc:
        raise DataError(f"{name} is not a parquet file, or it is damaged ({_first_line(exc)}); write it again (e.g. "
                        "pandas' DataFrame.to_parquet) or give the data as .csv or .jsonl") from exc
    if table.num_rows == 0:
        raise DataError(f"{name} has no rows (its columns: {', '.join(table.column_names)})")
    return FileRows(datasets.Dataset(InMemoryTable(table)), lambda i: f"row {i + 1} of {name} (counting from 1)")


# ----------------------------------------------------------------------------------------------
# every text file
# ----------------------------------------------------------------------------------------------
def check_text_file(path: Path, name: str, *, fix: str = "give a UTF-8 text file, one text per line",
                    chunk: int = 1 << 20) -> None:
    """A DataError unless ``path`` is a non-empty UTF-8 text file (no NUL bytes)."""
    if path.stat().st_size == 0:
        raise DataError(f"{name} is empty; a text dataset holds one text per line (UTF-8)")
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with path.open("rb") as file:
        while block := file.read(chunk):
            bad = block.find(b"\0")
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                bad = exc.start if bad < 0 else min(bad, exc.start)
            if bad >= 0:
                raise DataError(f"{name} is not a text file: byte {block[bad]:#04x} at offset {offset + bad} is "
                                f"{'a NUL byte' if block[bad] == 0 else 'not UTF-8'}; {fix}")
            offset += len(block)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise DataError(f"{name} is not a text file: it ends inside a UTF-8 character; {fix}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_missing(value: Any) -> bool:
    """A cell with nothing in it: None (an empty CSV cell, a JSON null) or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))
