"""RefBERT references: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.references`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError
from .modules import install_references
from .settings import REFERENCES_NAME, RIDGE_ALPHA
from .store import ReferenceStore


def restore_references(model: nn.Module, record, source: str | os.PathLike) -> None:
    """Rebuild reference attention of ``record.entry("references")`` with its store (before the strict load)."""
    data = record.entry("references")
    if not data:
        return
    path = Path(source) / data.get("file", REFERENCES_NAME)
    if not path.is_file():
        raise CheckpointError(f"{source} records reference attention but has no {path.name}; re-create it with "
                              "ghostify distill --references")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"corrupt reference store {path}: {exc}; re-create the checkpoint") from exc
    retrieval = data.get("retrieval", {})
    module = install_references(model, teacher_hidden=int(data["teacher_hidden_size"]), delta=float(data["delta"]),
                                ridge_alpha=float(retrieval.get("ridge_alpha", RIDGE_ALPHA)))
    ridge = tensors.pop("ridge", None)
    module.load_store(ReferenceStore.from_tensors(tensors))
    if ridge is not None:
        module.ridge = ridge.to(module.keys.device)
        module._stale = False
    module.agreement = retrieval.get("agreement")


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    restore_references(model, record, source)


def check_entry(entry: Any, config: Any, source: str) -> None:
    """The store must live in the checkpoint itself, never elsewhere on disk."""
    file = entry.get("file")
    if file is not None and (not isinstance(file, str) or Path(file).name != file or file in ("", ".", "..")):
        raise CheckpointError(f"corrupt ghostify record in {source}: references.file = {file!r}: expected a file name "
                              "inside the checkpoint; re-create the checkpoint")
