"""RefBERT references: changing a model, and its record entry (see :mod:`ghostify.methods.references`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
from torch import nn

from ...errors import GhostifyError
from .modules import ReferenceAttention, find_references
from .settings import REFERENCES_NAME


def reference_record(module: ReferenceAttention, *, teacher: str, teacher_hidden: int, student_hidden: int) -> dict[str, Any]:
    return {
        "method": "refbert", "delta": module.delta, "teacher": teacher, "teacher_hidden_size": teacher_hidden,
        "student_hidden_size": student_hidden, "teacher_to_student_map": module.map is not None,
        "entries": module.entries, "tokens": int(module.offsets[-1]) if module.offsets is not None else 0,
        "dtype": "float16", "file": REFERENCES_NAME,
        "sentence_embedding": "teacher last-layer hidden states, masked mean",
        "keys": "teacher embedding-layer output", "values": "teacher last-layer hidden states",
        "retrieval": module.settings(), "bytes": module.store_bytes(),
    }


def write_references(model: nn.Module, directory: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Write the store of ``model`` next to its weights; returns its record entry completed
    (refitting the retrieval map on this very student first, when it was trained since)."""
    module = find_references(model)
    if module is None or module.offsets is None:
        raise GhostifyError("the record lists reference attention but the model has no reference store; "
                            "load it with ghostify.checkpoint.load_model")
    module.ensure_fitted(model.base_model)
    tensors = {k: v.contiguous() for k, v in module.store().tensors().items()}
    tensors["ridge"] = module.ridge.detach().cpu().contiguous()
    safetensors.torch.save_file(tensors, str(directory / REFERENCES_NAME))
    return {**entry, "retrieval": module.settings(), "bytes": module.store_bytes(),
            "entries": module.entries, "tokens": int(module.offsets[-1])}


def measure(model: nn.Module, flop_counts: Any) -> dict[str, Any]:
    """The pre-computed store the student reads at inference, beside its parameters (None without one)."""
    module = find_references(model)
    if module is None or module.offsets is None:
        return {"reference_store": None}
    return {"reference_store": {"bytes": module.store_bytes(), "entries": module.entries,
                                "tokens": int(module.offsets[-1]), "delta": module.delta,
                                "retrieval_agreement": module.agreement}}
