"""Running an exported ONNX graph where ghostify runs a PyTorch model (``ghostify eval``, ``bench``)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ..errors import GhostifyError
from .onnx import ONNX_NAME, require_onnx, session_for


def onnx_path(model: str | os.PathLike) -> Path | None:
    """The ONNX file ``model`` names: a ``.onnx`` file, or an export directory (its fp32 graph);
    None for anything else."""
    path = Path(model)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise GhostifyError(f"ONNX model {path} does not exist; pass a file that `ghostify export --format onnx` wrote")
        return path
    if path.is_dir() and (path / ONNX_NAME).is_file():
        return path / ONNX_NAME
    return None


class OnnxModel(nn.Module):
    """An ONNX Runtime session behind the call ghostify's evaluation makes: ``model(**batch).logits``."""

    def __init__(self, path: Path, *, threads: int | None = None, spinning: bool = True):
        super().__init__()
        require_onnx()
        self.path = path
        if path.stat().st_size == 0:
            raise GhostifyError(f"ONNX model {path} is empty (0 bytes): it was not written completely; "
                                "re-create it with `ghostify export --format onnx`")
        try:
            self.session = session_for(path, threads=threads, spinning=spinning)
        except Exception as exc:  # ONNX Runtime's load errors (InvalidProtobuf, Fail, ...) share no class
            if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
                raise  # the machine's fault, not the file's: bench says it in one line
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise GhostifyError(f"ONNX model {path} cannot be loaded, it is truncated, damaged or not an ONNX graph "
                                f"({type(exc).__name__}: {first}); re-create it with `ghostify export --format onnx`"
                                ) from exc
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def forward(self, **batch: torch.Tensor) -> SimpleNamespace:
        feeds = {}
        for name in self.inputs:
            value = batch.get(name)
            if value is None and name == "token_type_ids":
                value = torch.zeros_like(batch["input_ids"])
            if value is None:
                raise GhostifyError(f"the ONNX model {self.path} needs the input {name!r}, which the batch lacks")
            feeds[name] = value.detach().cpu().numpy()
        values = self.session.run(None, feeds)
        return SimpleNamespace(**{name: torch.from_numpy(v) for name, v in zip(self.outputs, values)})
