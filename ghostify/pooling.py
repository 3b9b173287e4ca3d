"""A sentence-transformers model's layout around its encoder: where it is (a checkpoint, or the
model its history started from), its pooling and normalisation, and copying the layout along.

ghostify's commands write the encoder alone; the ``embeddings`` task pools its outputs as the
original model's ``modules.json`` says, and ``export`` writes the layout back around the export.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import GhostifyError

SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


@dataclass
class Pooling:
    """A sentence-transformers pooling module (``1_Pooling/config.json``) and normalisation."""

    mode: str  # mean, cls, max
    normalize: bool

    @classmethod
    def read(cls, directory: Path) -> "Pooling | None":
        try:
            modules = json.loads((directory / "modules.json").read_text())
        except (OSError, ValueError):
            return None
        mode, normalize = None, False
        for module in modules:
            kind = str(module.get("type", ""))
            if kind.endswith("Pooling"):
                config = json.loads((directory / module["path"] / "config.json").read_text())
                mode = next((m for m, key in (("cls", "pooling_mode_cls_token"), ("max", "pooling_mode_max_tokens"),
                                               ("mean", "pooling_mode_mean_tokens")) if config.get(key)), None)
                if mode is None:
                    raise GhostifyError(f"{directory / module['path'] / 'config.json'}: a pooling mode other than "
                                        "mean, cls or max, which ghostify does not compute; export --format hf keeps it")
            elif kind.endswith("Normalize"):
                normalize = True
            elif kind and not kind.endswith("Transformer"):
                raise GhostifyError(f"{directory / 'modules.json'} has a {kind} module, which the ONNX graph does not "
                                    "include; export --format hf keeps the whole sentence-transformers model")
        return cls(mode, normalize) if mode else None

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.mode == "cls":
            pooled = hidden[:, 0]
        elif self.mode == "max":
            pooled = hidden.masked_fill(mask[..., None] == 0, torch.finfo(hidden.dtype).min).amax(1)
        else:
            weights = mask[..., None].to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled


def sentence_transformers_source(source: Path, record: Any) -> Path | None:
    """The sentence-transformers model a checkpoint came from: itself, or the first model of its
    history (ghostify's commands write the encoder alone), if that is a local one."""
    candidates = [source]
    for entry in getattr(record, "history", []) or []:
        arguments = (entry.get("arguments") or entry) if isinstance(entry, dict) else {}
        model = next((arguments[k] for k in ("model", "student", "teacher") if arguments.get(k)), None)
        if model:
            candidates.append(Path(str(model)))
            break
    return next((c for c in candidates if (c / "modules.json").is_file()), None)


def copy_sentence_transformers(origin: Path, directory: Path) -> None:
    """Copy the sentence-transformers layout of ``origin`` (its modules other than the encoder:
    pooling, normalisation, dense layers) around the exported encoder."""
    for name in SENTENCE_TRANSFORMERS_FILES:
        if (origin / name).is_file():
            shutil.copy2(origin / name, directory / name)
    try:
        modules = json.loads((origin / "modules.json").read_text())
    except (OSError, ValueError) as exc:
        raise GhostifyError(f"cannot read {origin / 'modules.json'}: {exc}; fix or remove it") from None
    for module in modules:
        path = module.get("path", "") if isinstance(module, dict) else ""
        if path and (origin / path).is_dir():
            shutil.copytree(origin / path, directory / path, dirs_exist_ok=True)
