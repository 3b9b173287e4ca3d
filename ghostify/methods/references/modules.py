"""Wiring references into a model: :class:`ReferenceAttention` sits on the first layer's attention
module, holds the store (as non-persistent buffers, so it moves with the model but is saved in
``references.safetensors``, not in the weights) and the learned teacher→student map (a weight).

Per forward pass: a pre-hook on the encoder arms it; a pre-hook on the first layer keeps that
layer's input (the embedding-layer output) for the first application only (a shared ALBERT layer
runs again without references); the attention then asks :meth:`ReferenceAttention.consume` for the
reference keys/values (it is the column hook of ghostify's attention kernel, which also runs the
first layer's qk/v ghost modules and score capture). Training passes each example's
teacher-chosen reference (:meth:`ReferenceAttention.given`); otherwise the reference is retrieved
cheaply: the masked mean of the first layer's input, mapped by a ridge regression into the
teacher's sentence-embedding space, nearest by cosine among the index keys. Training marks the map
stale; it is refitted on the current student before the next retrieval and before saving.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...architectures import get_adapter
from ...errors import GhostifyError
from .families import check_reference_family, install_reference_attention
from .search import CHUNK, apply_ridge, masked_mean, nearest, ridge_fit
from .settings import RIDGE_ALPHA, check_delta
from .store import ReferenceStore, gather

_STORE_FIELDS = ("embeddings", "last", "offsets", "input_ids", "keys", "neighbours", "token_type_ids")


@dataclass
class ReferenceKV:
    key: torch.Tensor  # [B, H, Lr, d] the student's keys of the reference's teacher embeddings
    value: torch.Tensor  # [B, H, Lr, dv] the student's values of the reference's teacher last layer
    valid: torch.Tensor  # [B, Lr]


class _Stop(Exception):
    """Ends a forward pass once the first layer's input is known (refitting the retrieval map)."""


class ReferenceAttention(nn.Module):
    def __init__(self, *, teacher_hidden: int, student_hidden: int, delta: float, key: str, value: str,
                 ridge_alpha: float = RIDGE_ALPHA) -> None:
        super().__init__()
        check_delta(delta)
        self.delta = float(delta)
        self.key_path, self.value_path = key, value  # relative to the attention module
        self.ridge_alpha = ridge_alpha
        # teacher hidden states → student hidden size (learned, saved with the student)
        self.map = nn.Linear(teacher_hidden, student_hidden) if teacher_hidden != student_hidden else None
        for name in _STORE_FIELDS + ("ridge",):
            self.register_buffer(name, None, persistent=False)
        self.agreement: float | None = None
        self._indices: torch.Tensor | None = None
        self._armed = self._first = self._fitting = False
        self._stale = True
        self._hidden: torch.Tensor | None = None

    # ----- the store --------------------------------------------------------------------------
    def load_store(self, store: ReferenceStore, device: torch.device | str = "cpu") -> None:
        for name, tensor in store.tensors().items():
            setattr(self, name, tensor.to(device))
        self._stale = True

    def store(self) -> ReferenceStore:
        return ReferenceStore.from_tensors({n: getattr(self, n).detach().cpu() for n in _STORE_FIELDS
                                            if getattr(self, n) is not None})

    def store_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for n in _STORE_FIELDS + ("ridge",)
                   if (t := getattr(self, n)) is not None)

    @property
    def entries(self) -> int:
        return 0 if self.offsets is None else len(self.offsets) - 1

    # ----- per forward pass ---------------------------------------------------------------------
    @contextlib.contextmanager
    def given(self, indices: torch.Tensor) -> Iterator[None]:
        """Use these entries as the references of the next forward passes (training)."""
        self._indices = indices
        try:
            yield
        finally:
            self._indices = None

    def consume(self, attention: nn.Module, valid: torch.Tensor, *, heads: int) -> ReferenceKV | None:
        """The reference keys/values for this forward pass's first application, else None."""
        if not self._first:
            return None
        self._first = False
        hidden, self._hidden = self._hidden, None
        if self._indices is not None:
            index = self._indices.to(valid.device)
            if len(index) != len(valid):
                raise GhostifyError(f"{len(index)} reference indices for a batch of {len(valid)} examples")
        else:
            index = self.retrieve(masked_mean(hidden, valid))
        emb, last, ref_valid = self.entries_of(index, dtype=hidden.dtype)
        key = attention.get_submodule(self.key_path)(self._mapped(emb))
        value = attention.get_submodule(self.value_path)(self._mapped(last))
        batch, length = ref_valid.shape
        return ReferenceKV(key.view(batch, length, heads, key.size(-1) // heads).transpose(1, 2),
                           value.view(batch, length, heads, value.size(-1) // heads).transpose(1, 2), ref_valid)

    def _mapped(self, x: torch.Tensor) -> torch.Tensor:
        return self.map(x) if self.map is not None else x

    def entries_of(self, index: torch.Tensor, dtype: torch.dtype):
        """Teacher embeddings and last-layer states of entries ``index`` (padded) and their mask."""
        (emb, last), mask = gather(self.offsets, [self.embeddings, self.last], index)
        return emb.to(dtype), last.to(dtype), mask

    def retrieve(self, queries: torch.Tensor) -> torch.Tensor:
        """Cheap retrieval: student embedding mean → teacher sentence space (ridge) → cosine top-1."""
        if self.ridge is None:
            raise GhostifyError("reference retrieval has no fitted map; save the model (or load a saved one) first")
        return nearest(apply_ridge(self.ridge, queries), self.keys)

    # ----- the retrieval map ---------------------------------------------------------------------
    @torch.no_grad()
    def student_queries(self, encoder: nn.Module, batch_size: int = 64) -> torch.Tensor:
        """Masked means of the first layer's input for every entry (only the embeddings run)."""
        device = self.offsets.device
        packed = [self.input_ids] + ([self.token_type_ids] if self.token_type_ids is not None else [])
        out = []
        self._fitting = True
        try:
            for start in range(0, self.entries, batch_size):
                index = torch.arange(start, min(start + batch_size, self.entries), device=device)
                tensors, mask = gather(self.offsets, packed, index)
                inputs = {"input_ids": tensors[0], "attention_mask": mask.long()}
                if len(tensors) > 1:
                    inputs["token_type_ids"] = tensors[1]
                try:
                    encoder(**inputs)
                    raise RuntimeError("the first encoder layer did not run")
                except _Stop:
                    out.append(masked_mean(self._hidden, mask))
                    self._hidden = None
        finally:
            self._fitting = False
        return torch.cat(out)

    def refit(self, encoder: nn.Module) -> None:
        """Fit the ridge map on the current student (eval mode), and measure how often cheap
        retrieval picks the teacher's reference (over the entries, excluding self)."""
        modes = {m: m.training for m in encoder.modules()}
        encoder.eval()
        try:
            queries = self.student_queries(encoder)
        finally:
            for m, mode in modes.items():
                m.training = mode
        self.ridge = ridge_fit(queries, self.keys, self.ridge_alpha).to(self.keys.device)
        picked = nearest(apply_ridge(self.ridge, queries), self.keys, exclude_self=True)
        self.agreement = float((picked == self.neighbours).float().mean())
        self._stale = False

    def ensure_fitted(self, encoder: nn.Module) -> None:
        if self._stale or self.ridge is None:
            self.refit(encoder)

    def settings(self) -> dict[str, Any]:
        return {"query": "student embedding-layer output, masked mean, ridge map to the teacher's sentence space",
                "ridge_alpha": self.ridge_alpha, "search": "exact cosine top-1, chunked", "chunk": CHUNK,
                "agreement": self.agreement}


# ----------------------------------------------------------------------------------------------
# installing on a model
# ----------------------------------------------------------------------------------------------
def _first_attention(model: nn.Module):
    adapter = get_adapter(model.config)
    layer = adapter.layers(model)[0]
    paths = adapter.paths_for_layer(layer)
    return adapter, layer, layer.get_submodule(paths.attention), paths


def find_references(model: nn.Module) -> ReferenceAttention | None:
    _, _, attention, _ = _first_attention(model)
    return getattr(attention, "ghostify_reference", None)


def _relative(path: str, prefix: str) -> str:
    if not path.startswith(prefix + "."):
        raise GhostifyError(f"reference attention: projection {path} is not inside the attention module {prefix}")
    return path[len(prefix) + 1:]


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
