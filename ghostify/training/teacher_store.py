"""The teacher's outputs, computed once per training example and kept on disk: what distillation compares
(hidden states, attention-block outputs) and what a fine-tune with a teacher reads (its logits), for every
epoch and every stage that names the same store.

A teacher is frozen and runs in eval mode, so its outputs on a row depend on the row's tokens alone. The store
keys each row by a hash of its token ids (:func:`example_keys`), so the distill and the fine-tune stage of one
compression share what either computed, and a resumed or repeated run reuses it. Per-token tensors are kept
at the real tokens only (the attention mask's ones), in float16: a batch is rebuilt by scattering each row back
into zeros, which the masked losses never read. Whenever a store is in use, every teacher value the objective
reads passes through float16, freshly computed or read back, so that a run gives the same weights whether its
store was empty, half full or full (a resumed run equals an uninterrupted one). Without a store the teacher's
float32 outputs are used as before.

On disk (``DIRECTORY/<teacher fingerprint>/``): one append-only ``NAME.bin`` per field and ``index.npz``, the
rows each file holds (key, offset, shape), replaced in one rename at every :meth:`TeacherStore.flush`; bytes
appended after the last flush are cut off when the store is opened again (a crash loses them, nothing else).
A cap on the bytes decides what is kept: once full, the rest is computed on every visit, as without a store.
The head's outputs (the logits a fine-tune reads) have a share of the cap to themselves (:data:`HEAD_RESERVE`):
a row whose hidden states no longer fit keeps its head's outputs, a few bytes, so the fine-tune after a long
distillation reads every text's logits back (SST-2 at 6x with ``--budget 20m`` filled the 4 GiB with the hidden
states of 36,252 of its 47,723 texts, and its fine-tune ran the teacher again on 29% of its rows, 1,020 of the
1,610 steps it was planned for done by the deadline).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..device import synchronize
from ..errors import GhostifyError
from ..files import held_lock

#: the stored dtype: 11 significant bits, the range of hidden states and logits
STORED = np.float16
FORMAT = 1
INDEX = "index.npz"
KEY = "example_key"
#: the share of the cap only the head's outputs (``Field.head``) may fill, once the rest of it is full: SST-2's
#: logits are 4 bytes a text, a 256-token SQuAD window's start and end logits 1 KiB, one 384-wide hidden state of
#: the window 192 KiB
HEAD_RESERVE = 1 / 64
#: where a run keeps its store when none is named (inside ``OUT.partial``: removed with it)
RUN_STORE = "teacher-outputs"


def example_keys(rows: Any) -> list[int]:
    """A 63-bit key per row of ``rows`` (a datasets.Dataset or a list of dicts): a hash of its token ids and
    segment ids, what the teacher's outputs on the row depend on."""
    ids = rows["input_ids"] if not isinstance(rows, list) else [r["input_ids"] for r in rows]
    types = None
    names = rows.column_names if hasattr(rows, "column_names") else (rows[0].keys() if rows else ())
    if "token_type_ids" in names:
        types = rows["token_type_ids"] if not isinstance(rows, list) else [r["token_type_ids"] for r in rows]
    keys = []
    for i, row in enumerate(ids):
        digest = hashlib.blake2b(np.asarray(row, dtype=np.int64).tobytes(), digest_size=8)
        if types is not None:
            digest.update(b"|" + np.asarray(types[i], dtype=np.int64).tobytes())
        keys.append(int.from_bytes(digest.digest(), "little") & (2**63 - 1))
    return keys


def with_keys(rows: Any) -> Any:
    """``rows`` with the :data:`KEY` column (:func:`example_keys`)."""
    keys = example_keys(rows)
    if isinstance(rows, list):
        return [{**row, KEY: key} for row, key in zip(rows, keys)]
    return rows.add_column(KEY, keys)


def keyed_collator(collate: Callable[[list[dict]], Any]) -> Callable[[list[dict]], Any]:
    """``collate`` for rows with a :data:`KEY`: the keys become one int64 tensor of the batch, the rest is
    collated as before."""

    def run(rows: list[dict]) -> Any:
        keys = [row[KEY] for row in rows]
        batch = collate([{k: v for k, v in row.items() if k != KEY} for row in rows])
        batch[KEY] = torch.tensor(keys, dtype=torch.int64)
        return batch

    return run


def fingerprint(teacher: str | os.PathLike, precision: str = "no") -> str:
    """What identifies a teacher's outputs: the content of its config and weight files (a hub id: its name),
    the torch version that computes them, and the precision of its passes (``TrainSettings.teacher_precision``:
    bf16's rounding is coarser than the stored float16's; float32's key is the one stores had before)."""
    digest = hashlib.sha256(f"format {FORMAT} torch {torch.__version__}".encode())
    if precision != "no":
        digest.update(f"precision {precision}".encode())
    path = Path(teacher)
    if path.is_dir():
        for file in sorted(path.iterdir()):
            if file.name == "config.json" or file.suffix in (".safetensors", ".bin"):
                digest.update(file.name.encode())
                with file.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
    else:
        digest.update(str(teacher).encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Field:
    """One stored tensor of the teacher's outputs: ``per_token`` ones are ``[tokens, ...]`` per row."""

    name: str
    per_token: bool
    head: bool = False  # the head's outputs (logits): kept in the cap's reserve when the row's other fields do not fit


@dataclass
class _Column:
    """One field's rows on disk: where each key's values start (in elements) and their shape."""

    offsets: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    length: int = 0  # bytes of the data file covered by the index


class TeacherStore:
    """The stored outputs of one teacher (``teacher``: its path or hub id) under ``directory`` (None: the run's
    own, inside ``OUT.partial``), at most ``cap_bytes`` of them. Opened by :meth:`open` (the training loop does,
    once it knows one process runs); :meth:`fetch` is what objectives call."""

    def __init__(self, directory: str | os.PathLike | None, teacher: str | os.PathLike, cap_bytes: int,
                 precision: str = "no") -> None:
        self.root = Path(directory) if directory is not None else None
        self.teacher = str(teacher)
        self.precision = precision  # of the teacher's passes: part of the key
        self.cap_bytes = int(cap_bytes)
        self.directory: Path | None = None
        self.columns: dict[str, _Column] = {}
        self.files: dict[str, Any] = {}
        self.reused = self.computed = self.stored = self.head_only = 0
        # the store's own wall seconds (the teacher's pass not counted): on batches it computed and stored, and on
        # batches it read back whole; what a throughput probe weighs against the teacher's pass
        self.seconds = {"storing": 0.0, "reading": 0.0}
        self._lock: Any = None

    # ----- lifetime ----------------------------------------------------------------------------
    def open(self, run_directory: Path) -> TeacherStore:
        """Open the store for reading and writing (``run_directory``: where it lives when no directory was
        named); one run at a time writes a store, a second waits."""
        if self.root is None:
            self.root = run_directory
        directory = self.root / fingerprint(self.teacher, self.precision)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GhostifyError(f"cannot create the teacher store {directory} ({exc.strerror}); choose another "
                                "--teacher-store, or set --teacher-store-gb 0 to compute the teacher's outputs on "
                                "the fly") from None
        self._lock = held_lock(directory / ".lock")  # one writer: a second run on the store waits its turn
        self._lock.__enter__()
        self.directory = directory
        (directory / "teacher.json").write_text(json.dumps({"teacher": self.teacher, "format": FORMAT}))
        self.columns = _read_index(directory / INDEX)
        # bytes appended after the last flush are not indexed: cut (a field first written after it, or a run
        # killed before its first flush, has no index entry: all its bytes go)
        for path in directory.glob("*.bin"):
            indexed = self.columns[path.stem].length if path.stem in self.columns else 0
            if path.stat().st_size > indexed:
                os.truncate(path, indexed)
        return self

    def close(self) -> None:
        if self.directory is None:
            return
        self.flush()
        for handle in self.files.values():
            handle.close()
        self.files.clear()
        self._lock.__exit__(None, None, None)
        self.directory = None

    def flush(self) -> None:
        """Make what was stored so far durable: the data first, then the index that points into it."""
        if self.directory is None:
            return
        for handle in self.files.values():
            handle.flush()
            os.fsync(handle.fileno())
        _write_index(self.directory / INDEX, self.columns)

    @property
    def bytes(self) -> int:
        return sum(column.length for column in self.columns.values())

    def summary(self) -> dict[str, Any]:
        """What the run's ``training.json`` records: rows read back, computed, stored, and the store's size."""
        return {"directory": str(self.root), "dtype": "float16", "reused": self.reused, "computed": self.computed,
                "stored": self.stored, "head_only": self.head_only, "bytes": self.bytes, "cap_bytes": self.cap_bytes,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}

    # ----- rows --------------------------------------------------------------------------------
    def _data(self, name: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{name}.bin"

    def holds(self, key: int, fields: Iterable[Field]) -> bool:
        return all(key in self.columns.get(f.name, _Column()).offsets for f in fields)

    def read(self, key: int, name: str) -> np.ndarray:
        offset, shape = self.columns[name].offsets[key]
        count = int(np.prod(shape)) if shape else 1
        item = np.dtype(STORED).itemsize
        fd = self._reader(name)
        raw = os.pread(fd, count * item, offset * item)
        return np.frombuffer(raw, dtype=STORED).reshape(shape)

    def _reader(self, name: str) -> int:
        handle = self._writer(name)
        handle.flush()  # rows appended since the last flush are read through the OS's page cache
        return handle.fileno()

    def _writer(self, name: str):
        if name not in self.files:
            self.files[name] = open(self._data(name), "a+b")  # noqa: SIM115 - kept open until close()
        return self.files[name]

    def write(self, key: int, values: Mapping[str, np.ndarray], head: Collection[str] = ()) -> bool:
        """Store one row's ``values`` (every field of it: a row is reused only whole) while they fit within the cap
        less its :data:`HEAD_RESERVE`; where they do not, its ``head`` fields alone while they fit within the whole
        cap. False when nothing new was stored."""
        new = {name: value for name, value in values.items()
               if key not in self.columns.get(name, _Column()).offsets}
        if not new:
            return False
        used = self.bytes
        if used + sum(v.nbytes for v in new.values()) > self.cap_bytes * (1 - HEAD_RESERVE):
            new = {name: value for name, value in new.items() if name in head}
            if not new or used + sum(v.nbytes for v in new.values()) > self.cap_bytes:
                return False
        for name, value in new.items():
            column = self.columns.setdefault(name, _Column())
            handle = self._writer(name)
            item = np.dtype(STORED).itemsize
            handle.seek(0, os.SEEK_END)
            start = handle.tell()
            if start != column.length:  # never: the file and its index move together
                raise RuntimeError(f"teacher store field {name}: file at {start} bytes, index at {column.length}")
            handle.write(np.ascontiguousarray(value, dtype=STORED).tobytes())
            column.offsets[key] = (start // item, tuple(value.shape))
            column.length = start + value.nbytes
        if all(key in self.columns.get(name, _Column()).offsets for name in values):
            self.stored += 1
        else:
            self.head_only += 1
        return True

    def fetch(self, keys: torch.Tensor, mask: torch.Tensor, fields: list[Field],
              compute: Callable[[torch.Tensor], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The ``fields`` of a batch of rows (``keys``; ``mask``: their attention mask, batch x tokens), in
        float32 on ``mask``'s device: read back for the rows the store holds, ``compute(rows)`` (the teacher on
        those rows of the batch, at the batch's length) for the rest, which are then stored where there is room.
        Every value has passed through float16."""
        started, computing = time.perf_counter(), 0.0
        key_list = [int(k) for k in keys.tolist()]
        real = mask.bool().cpu()
        missing = [i for i, k in enumerate(key_list) if not self.holds(k, fields)]
        computed: dict[str, torch.Tensor] = {}
        if missing:
            before = time.perf_counter()
            outputs = compute(torch.tensor(missing, device=mask.device))
            synchronize(mask.device)  # the teacher's queued pass, timed as the teacher's
            computing = time.perf_counter() - before
            # each field to the CPU in float16 once for the batch: row by row, a GPU paid a copy and a wait for every
            # row of every field, twice (what is used and what is stored): 896 for 32 rows of 14 fields
            computed = {f.name: outputs[f.name].detach().to("cpu", torch.float16) for f in fields}
        self.computed += len(missing)
        self.reused += len(key_list) - len(missing)
        position = {i: j for j, i in enumerate(missing)}  # a missing row's place in what was computed

        def computed_row(name: str, per_token: bool, i: int) -> torch.Tensor:
            value = computed[name][position[i]]
            return value[real[i]] if per_token else value

        out: dict[str, torch.Tensor] = {}
        for f in fields:
            rows = [computed_row(f.name, f.per_token, i) if i in position
                    else torch.from_numpy(self.read(key, f.name).copy()) for i, key in enumerate(key_list)]
            out[f.name] = _assemble(rows, real, f.per_token).to(mask.device)
        head = {f.name for f in fields if f.head}
        for i in missing:
            row = {f.name: computed_row(f.name, f.per_token, i).numpy() for f in fields}
            if not all(np.isfinite(v).all() for v in row.values()):
                continue  # beyond float16's range: this row stays computed on every visit
            self.write(key_list[i], row, head=head)
        self.seconds["storing" if missing else "reading"] += time.perf_counter() - started - computing
        return out


def _assemble(rows: list[torch.Tensor], real: torch.Tensor, per_token: bool) -> torch.Tensor:
    """Rows of real tokens (or whole rows) as one float32 batch, zeros at the padding."""
    if not per_token:
        return torch.stack([r.float() for r in rows])
    trailing = rows[0].shape[1:]
    batch = torch.zeros((real.shape[0], real.shape[1], *trailing), dtype=torch.float32)
    # float32 before the cat: under CPU autocast (bf16 training) cat promotes its inputs, and refuses float16 there
    batch[real] = torch.cat([r.float() for r in rows])  # a mask's true places in row order: row by row
    return batch


def _read_index(path: Path) -> dict[str, _Column]:
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            columns = {}
            for j, name in enumerate(meta["names"]):
                keys, offsets = saved[f"keys{j}"], saved[f"offsets{j}"]
                shapes, ndim = saved[f"shapes{j}"], meta["ndims"][j]
                column = _Column(length=int(meta["lengths"][j]))
                for k, o, s in zip(keys.tolist(), offsets.tolist(), shapes.reshape(len(keys), ndim).tolist()):
                    column.offsets[int(k)] = (int(o), tuple(int(x) for x in s))
                columns[name] = column
            return columns
    except (OSError, ValueError, KeyError) as exc:
        raise GhostifyError(f"the teacher store index {path} is damaged ({exc}); remove {path.parent} (it is only a "
                            "cache: the outputs are computed again)") from None


def _write_index(path: Path, columns: dict[str, _Column]) -> None:
    names = sorted(columns)
    arrays: dict[str, np.ndarray] = {}
    ndims = []
    for j, name in enumerate(names):
        items = list(columns[name].offsets.items())
        ndim = len(items[0][1][1]) if items else 0
        ndims.append(ndim)
        arrays[f"keys{j}"] = np.array([k for k, _ in items], dtype=np.int64)
        arrays[f"offsets{j}"] = np.array([o for _, (o, _) in items], dtype=np.int64)
        arrays[f"shapes{j}"] = np.array([s for _, (_, s) in items], dtype=np.int64).reshape(-1)
    meta = {"names": names, "ndims": ndims, "lengths": [columns[n].length for n in names]}
    arrays["meta"] = np.array(json.dumps(meta))
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


__all__ = ["Field", "KEY", "RUN_STORE", "TeacherStore", "example_keys", "fingerprint", "keyed_collator", "with_keys"]
