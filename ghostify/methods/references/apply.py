"""RefBERT references: changing a model, and its record entry (see :mod:`ghostify.methods.references`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
import torch
from torch import nn

from ...errors import GhostifyError
from .families import check_reference_family, install_reference_attention
from .modules import ReferenceAttention, _first_attention, _relative, _Stop, find_references
from .settings import REFERENCES_NAME, RIDGE_ALPHA


def install_references(model: nn.Module, *, teacher_hidden: int, delta: float,
                       ridge_alpha: float = RIDGE_ALPHA) -> ReferenceAttention:
    """Add reference attention to ``model``'s first layer (no store yet); idempotent hooks."""
    adapter, layer, attention, paths = _first_attention(model)
    check_reference_family(adapter, model.config)
    if getattr(attention, "ghostify_reference", None) is not None:
        raise GhostifyError("the student already has reference attention (distill --references ran on it); "
                            "distill its source again, or distill without --references")
    module = ReferenceAttention(teacher_hidden=teacher_hidden, student_hidden=adapter.hidden_size(model.config),
                                delta=delta, key=_relative(paths.key, paths.attention),
                                value=_relative(paths.value, paths.attention), ridge_alpha=ridge_alpha)
    weight = next(attention.parameters())
    module.to(device=weight.device, dtype=weight.dtype)
    attention.add_module("ghostify_reference", module)
    install_reference_attention(adapter, model.config.model_type, attention)

    def arm(encoder: nn.Module, args) -> None:
        if module._fitting:
            return
        if encoder.training and torch.is_grad_enabled():
            module._stale = True  # the student is being trained: its embeddings change
        elif module._indices is None and module.offsets is not None and (module._stale or module.ridge is None):
            module.refit(encoder)
        module._armed, module._first, module._hidden = True, False, None

    def keep_input(layer_module: nn.Module, args, kwargs) -> None:
        hidden = args[0] if args else next(iter(kwargs.values()))
        if module._fitting:
            module._hidden = hidden
            raise _Stop
        if module._armed:
            module._armed, module._first, module._hidden = False, True, hidden

    model.base_model.register_forward_pre_hook(arm)
    layer.register_forward_pre_hook(keep_input, with_kwargs=True)
    return module


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


def write_references(model: nn.Module, directory: Path, record) -> None:
    """Write the store of ``model`` next to its weights and complete ``record.references``
    (refitting the retrieval map on this very student first, when it was trained since)."""
    if not getattr(record, "references", None):
        return
    module = find_references(model)
    if module is None or module.offsets is None:
        raise GhostifyError("the record lists reference attention but the model has no reference store; "
                            "load it with ghostify.checkpoint.load_model")
    module.ensure_fitted(model.base_model)
    tensors = {k: v.contiguous() for k, v in module.store().tensors().items()}
    tensors["ridge"] = module.ridge.detach().cpu().contiguous()
    safetensors.torch.save_file(tensors, str(directory / REFERENCES_NAME))
    record.references = {**record.references, "retrieval": module.settings(), "bytes": module.store_bytes(),
                         "entries": module.entries, "tokens": int(module.offsets[-1])}
