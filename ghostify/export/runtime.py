"""Running an exported graph where ghostify runs a PyTorch model (``ghostify eval``, ``bench``), in the
runtime that wrote it (``ghostify.runtimes``)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ..errors import GhostifyError
from ..runtimes import Target, feeds_for, first_line, graph_of


def onnx_path(model: str | os.PathLike) -> Path | None:
    """The ONNX file ``model`` names: a ``.onnx`` file, or an ONNX export directory (its fp32 graph);
    None for anything else."""
    found = graph_of(model)
    return found[1] if found is not None and found[0].runtime.name == "onnx" else None


class GraphModel(nn.Module):
    """A graph loaded in its runtime behind the call ghostify's evaluation makes: ``model(**batch).logits``.
    ``precision`` None: the runtime's default on this CPU (what ships); "f32" forces fp32 arithmetic."""

    def __init__(self, path: Path, target: Target | None = None, *, threads: int | None = None,
                 precision: str | None = None, spinning: bool = True):
        super().__init__()
        if target is None:
            found = graph_of(path)
            if found is None:
                raise GhostifyError(f"{path} is no exported graph; pass a file that `ghostify export --format ...` wrote")
            target = found[0]
        self.path, self.target = path, target
        title, name = target.runtime.format_title, target.runtime.name
        target.runtime.require()
        if path.stat().st_size == 0:
            raise GhostifyError(f"{title} model {path} is empty (0 bytes): it was not written completely; "
                                f"re-create it with `ghostify export --format {name}`")
        try:
            self.session = target.runtime.load(path, threads=threads, precision=precision, spinning=spinning)
        except Exception as exc:  # runtimes' load errors (InvalidProtobuf, Fail, RuntimeError, ...) share no class
            if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
                raise  # the machine's fault, not the file's: bench says it in one line
            raise GhostifyError(f"{title} model {path} cannot be loaded, it is truncated, damaged or not an {title} "
                                f"graph ({type(exc).__name__}: {first_line(exc)}); re-create it with "
                                f"`ghostify export --format {name}`") from exc
        self.inputs = list(self.session.inputs)
        self.outputs = list(self.session.outputs)

    def forward(self, **batch: torch.Tensor) -> SimpleNamespace:
        values = self.session.run(feeds_for(self.session, batch, self.path))
        return SimpleNamespace(**{name: torch.from_numpy(v) for name, v in zip(self.outputs, values)})

