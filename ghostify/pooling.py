"""A sentence-transformers model's layout around its encoder: where it is (a checkpoint, or the
model its history started from), its pooling and normalisation, and copying the layout along.

ghostify's commands write the encoder alone; the ``embeddings`` task pools its outputs as the
original model's ``modules.json`` says, and ``export`` writes the layout back around the export.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import GhostifyError
from .files import copy_code_files, path_inside

SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


@dataclass
class Pooling:
    """A sentence-transformers pooling module (``1_Pooling/config.json``) and normalisation."""

    mode: str  # mean, cls, max
    normalize: bool

    @classmethod
    def read(cls, directory: Path) -> "Pooling | None":
        modules = read_modules(directory)
        if modules is None:
            return None
        mode, normalize = None, False
        for module in modules:
            kind = str(module.get("type", ""))
            if kind.endswith("Pooling"):
                mode = _pooling_mode(directory, module.get("path"))
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


def export_layout_source(source: Path, record: Any) -> Path | None:
    """The sentence-transformers model whose layout an export of ``source`` is written in: none when
    ``source`` has a task head (its config's class is a ``...For...`` one), since sentence-transformers
    loads the bare encoder and would drop the head (a classifier fine-tuned from an embedding model)."""
    return None if _has_task_head(source) else sentence_transformers_source(source, record)


def _has_task_head(source: Path) -> bool:
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # a hub id, or a config the loader reports on
    names = config.get("architectures") if isinstance(config, dict) else None
    return any("For" in str(name) for name in names or [])


def read_modules(directory: Path) -> list[dict[str, Any]] | None:
    """The modules ``directory/modules.json`` lists, checked: a list of objects whose paths stay
    inside ``directory``; None when there is no ``modules.json``."""
    path = directory / "modules.json"
    if not path.is_file():
        return None
    path_inside(directory, "modules.json", "modules.json")
    try:
        modules = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GhostifyError(f"cannot read {path}: {exc}; fix or remove it") from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise GhostifyError(f"{path} is not a list of modules (a JSON list of objects with a path and a type, as "
                            "sentence-transformers writes it); fix or remove it")
    for module in modules:
        if module.get("path"):
            path_inside(directory, module["path"], "modules.json")
    return modules


RESTORE = "restore it from the original sentence-transformers model"


def _pooling_mode(directory: Path, folder: Any) -> str:
    """The mode of the pooling module in ``directory/folder`` (mean, cls or max)."""
    file = path_inside(directory, str(Path(str(folder or "")) / "config.json"), "modules.json")
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise GhostifyError(f"{file} is missing: {directory / 'modules.json'} lists a pooling module in {folder!r} "
                            f"without its config.json; {RESTORE}") from None
    except (OSError, ValueError) as exc:
        raise GhostifyError(f"cannot read {file}: {exc}; {RESTORE}") from None
    config = config if isinstance(config, dict) else {}
    mode = next((m for m, key in (("cls", "pooling_mode_cls_token"), ("max", "pooling_mode_max_tokens"),
                                   ("mean", "pooling_mode_mean_tokens")) if config.get(key)), None)
    if mode is None:
        raise GhostifyError(f"{file}: a pooling mode other than mean, cls or max, which ghostify does not compute; "
                            "export --format hf keeps it")
    return mode


def copy_sentence_transformers(origin: Path, directory: Path) -> None:
    """Copy the sentence-transformers layout of ``origin`` (its modules other than the encoder:
    pooling, normalisation, dense layers, and the code of custom modules) around the exported
    encoder. Every path ``modules.json`` names must lie inside ``origin`` (a ``../`` would write
    outside the export)."""
    modules = read_modules(origin) or []
    for name in SENTENCE_TRANSFORMERS_FILES:
        if (origin / name).is_file():
            shutil.copy2(path_inside(origin, name, name), directory / name)
    for module in modules:
        path = module.get("path", "")
        if path and (origin / path).is_dir():
            _check_tree(origin, path)
            shutil.copytree(origin / path, directory / path, dirs_exist_ok=True)
    copy_code_files(origin, directory, [str(m.get("type", "")) for m in modules], "modules.json")


def set_embedding_dimension(directory: Path, width: int) -> None:
    """Make the sentence-transformers layout in ``directory`` say that the encoder's output is ``width`` wide (a
    model whose hidden size was cut): its pooling config's ``word_embedding_dimension``, which
    sentence-transformers reports as the embedding size. A dense module after the pooling reads the old width
    and is refused."""
    for module in read_modules(directory) or []:
        kind, folder = str(module.get("type", "")), str(module.get("path") or "")
        if not (kind.endswith("Pooling") or kind.endswith("Dense")):
            continue
        file = path_inside(directory, str(Path(folder) / "config.json"), "modules.json")
        try:
            config = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise GhostifyError(f"cannot read {file}: {exc}; {RESTORE}") from None
        if not isinstance(config, dict):
            continue
        if kind.endswith("Dense") and config.get("in_features") not in (None, width):
            raise GhostifyError(f"{directory / 'modules.json'} has a dense module ({folder}) that reads "
                                f"{config['in_features']} features, but the encoder's output is {width} wide (its hidden "
                                "size was cut); prune the hidden size with --keep-output-dim for this model")
        if kind.endswith("Pooling") and config.get("word_embedding_dimension") != width:
            config["word_embedding_dimension"] = width
            file.write_text(json.dumps(config, indent=2))


def _check_tree(directory: Path, folder: str) -> None:
    """Nothing under ``directory/folder`` leads out of ``directory`` through a symlink."""
    for parent, dirs, files in os.walk(directory / folder):
        for name in (*dirs, *files):
            path_inside(directory, str(Path(parent, name).relative_to(directory)), "modules.json")
