"""The attention mask of the forward pass in progress, shared by one model's ghost modules.

Ghost convolutions slide over the sequence, so a padded batch must look to them exactly like each
sequence alone: padded positions are zeroed before convolving, which is what the convolution's own
zero padding does beyond the ends of a sequence that is alone (right or left padding alike).

The mask is captured generically from the encoder's (``model.base_model``, which every task head
calls) ``attention_mask`` argument, by wrapping its ``forward``: not a forward pre-hook, which
``encoder.forward(...)`` skips (sentence-transformers calls that). No Hugging Face submodule is named.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn

from ...errors import GhostifyError

#: attribute on ``model.base_model`` that holds its context (a plain object, not a submodule)
CONTEXT_ATTR = "_ghostify_ghost_context"


class GhostContext:
    """Holds the 2-D attention mask of the latest forward call of one encoder.

    ``keep(x)`` gives the (batch, seq) 0/1 factor in ``x``'s dtype, or ``None`` when no token is
    padded (then the ghost modules skip the masking pass entirely).
    """

    def __init__(self, mask_index: int | None) -> None:
        self._mask_index = mask_index  # position of ``attention_mask`` among the positional args
        self.mask: torch.Tensor | None = None  # bool (batch, seq); None: no padding
        self._keep: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    @classmethod
    def for_encoder(cls, encoder: nn.Module) -> GhostContext:
        """The context of ``encoder``: its installed one, or a new one (not installed yet)."""
        existing = getattr(encoder, CONTEXT_ATTR, None)
        if existing is not None:
            return existing
        try:
            params = list(inspect.signature(encoder.forward).parameters)
        except (TypeError, ValueError):
            params = []
        if "attention_mask" not in params:
            raise GhostifyError(
                f"{type(encoder).__name__}.forward takes no attention_mask, which ghost modules need to keep padding "
                "out of their convolutions; this model cannot take ghost modules"
            )
        return cls(params.index("attention_mask"))

    def install(self, encoder: nn.Module) -> None:
        """Feed this context from ``encoder``'s forward calls (a no-op when already installed)."""
        if getattr(encoder, CONTEXT_ATTR, None) is self:
            return
        encoder.forward = _Capturing(self, encoder.forward)
        setattr(encoder, CONTEXT_ATTR, self)

    def _capture(self, args: tuple, kwargs: dict[str, Any]) -> None:
        mask = kwargs.get("attention_mask")
        if mask is None and self._mask_index is not None and len(args) > self._mask_index:
            mask = args[self._mask_index]
        self.set_mask(mask)

    def set_mask(self, mask: torch.Tensor | None) -> None:
        self._keep = {}
        if mask is None:
            self.mask = None
            return
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(
                f"ghost modules need a 2-D attention_mask (batch, sequence) of 0/1, got {shape}; "
                "pass the tokenizer's attention_mask"
            )
        mask = mask != 0
        # one host sync per forward pass buys skipping every masking multiply on unpadded batches;
        # a graph being traced for export keeps the multiply (the same result either way), since it
        # must serve every batch, padded or not
        self.mask = mask if tracing() or not bool(mask.all()) else None

    def keep(self, x: torch.Tensor, batch: int, length: int) -> torch.Tensor | None:
        """The (batch, length) 0/1 mask in ``x``'s dtype and device, or None without padding."""
        if self.mask is None:
            return None
        if tuple(self.mask.shape) != (batch, length):
            raise RuntimeError(
                f"a ghost module saw a (batch, sequence) of {(batch, length)} but the encoder's attention_mask is "
                f"{tuple(self.mask.shape)}; ghost layers must run inside the encoder's forward (no sequence chunking)"
            )
        key = (x.dtype, x.device)
        if key not in self._keep:
            self._keep[key] = self.mask.to(device=x.device, dtype=x.dtype)
        return self._keep[key]


class _Capturing:
    """``encoder.forward`` that first hands its attention mask to the context (same signature)."""

    def __init__(self, context: GhostContext, forward: Any) -> None:
        functools.update_wrapper(self, forward)
        self.context, self.forward = context, forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.context._capture(args, kwargs)
        return self.forward(*args, **kwargs)


def tracing() -> bool:
    """Whether this forward pass is being captured as a graph (torch.export, ONNX, TorchScript)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
