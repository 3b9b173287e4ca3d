"""``ghostify export --format hf``: a checkpoint that loads with stock ``from_pretrained``.

A stock transformers config cannot describe what ghostify changes (fewer heads at the same head
size, uneven widths per layer, ghost modules, grouped or shared layers, factorised embeddings), so
the exported directory carries its structure code: ``modeling_ghostify.py`` subclasses the
checkpoint's own transformers classes, and each subclass rebuilds the recorded structure (the
``ghostify`` entry of ``config.json``) right after the stock ``__init__``, before the weights
load. The code it calls is the methods' own ``restore`` code, flattened beside it
(:mod:`ghostify.export.code`); ``config.json``'s ``auto_map`` points the Auto classes at it, so
``AutoModel....from_pretrained(OUT, trust_remote_code=True)`` works where ghostify is not installed.
A model whose structure a stock config can state (an FFN width that is the same in every layer and
nothing else) is written as a plain stock checkpoint instead, with no code at all.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn

from ..architectures import get_adapter
from ..checkpoint import WEIGHTS_NAME, model_record
from ..errors import GhostifyError
from ..files import copy_tokenizer
from ..methods import export_refusals, hook_module, lazy
from ..methods import methods as registered
from ..pooling import copy_sentence_transformers, set_embedding_dimension
from ..record import RECORD_KEY
from ..version import __version__
from .code import closure, flat_name, write_flat

MODELING = "modeling_ghostify"
STRUCTURE = "ghostify_structure"
#: the Auto classes an export maps: the bare encoder always (sentence-transformers loads it),
#: and the one whose class the checkpoint was saved with
AUTO_CLASSES = ("AutoModel", "AutoModelForSequenceClassification", "AutoModelForTokenClassification",
                "AutoModelForQuestionAnswering", "AutoModelForMaskedLM", "AutoModelForMultipleChoice",
                "AutoModelForPreTraining")
#: the files of a sentence-transformers model besides the encoder's own


#: The opening of a Python script that must run without ghostify, as an exported model's user runs it:
#: importing ghostify fails there, even where it is installed. The export's own check and the tests that load
#: exports in a child process start their scripts with it (most with QUIET_TRANSFORMERS after it).
WITHOUT_GHOSTIFY = """\
import sys


class _NoGhostify:
    def find_spec(self, name, path=None, target=None):
        if name == "ghostify" or name.startswith("ghostify."):
            raise ImportError("ghostify is not available to an exported model")


sys.meta_path.insert(0, _NoGhostify())
"""

#: transformers imported with its warnings, logging and progress bars off (a child script's output is its result)
QUIET_TRANSFORMERS = """\
import warnings
warnings.simplefilter("ignore")
import transformers  # noqa: E402
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
"""

@dataclass
class HFExport:
    stock: bool  # True: a plain stock checkpoint, no code
    auto_class: str  # the Auto class that builds the checkpoint's own class
    classes: dict[str, str]  # Auto class -> class name in modeling_ghostify (empty when stock)
    code_files: list[str]
    sentence_transformers: str | None  # where the sentence-transformers layout came from


def needs_code(model: nn.Module, record: Any) -> bool:
    """Whether a stock config cannot describe the structure ``record`` gives ``model``."""
    adapter = get_adapter(model.config)
    stock = {m.name for m in registered() if m.stock}
    if set(record.methods) - stock:  # a method a stock config cannot describe (pruning's widths: below)
        return True
    full = list(range(adapter.num_units(model.config)))
    # all heads kept in another order is stock unless the family has per-head state outside the
    # projections (a shared position bias), whose columns a stock model would not reorder
    reordered = any(list(h) != full for h in record.heads)
    return (any(sorted(h) != full for h in record.heads) or len(set(record.ffn)) > 1
            or (reordered and adapter.position_bias_arg is not None))


def auto_classes(model: nn.Module) -> dict[str, type]:
    """Auto class name -> the transformers class it builds for this config (AutoModel and the
    checkpoint's own class)."""
    import transformers

    out: dict[str, type] = {}
    for auto_name in AUTO_CLASSES:
        try:
            cls = getattr(transformers, auto_name)._model_mapping[type(model.config)]
        except KeyError:
            continue
        cls = cls[0] if isinstance(cls, (tuple, list)) else cls
        if auto_name == "AutoModel" or cls is type(model):
            out[auto_name] = cls
    return out


def write_hf(model: nn.Module, directory: Path, *, source: str | Path,
             sentence_transformers: Path | None = None) -> HFExport:
    """Write ``model`` (loaded by ghostify from ``source``) into ``directory`` for stock loading,
    around it the layout of the ``sentence_transformers`` model it came from, if any
    (:func:`sentence_transformers_source`)."""
    record = model_record(model)
    refusals = export_refusals(record, "hf")
    if refusals:
        raise GhostifyError(f"{source} {refusals[0]}")
    config = copy.deepcopy(model.config)
    stock = not needs_code(model, record)
    classes: dict[str, str] = {}
    code_files: list[str] = []
    autos = auto_classes(model)
    auto_class = next((auto for auto, cls in autos.items() if cls is type(model)), "AutoModel")
    # ghostify built the model with transformers' own classes, never the checkpoint's remote code
    # (Jina v3 ships some): a stale auto_map would point trust_remote_code at files not exported
    drop_auto_map(config)
    if stock:
        adapter = get_adapter(config)
        setattr(config, adapter.ffn_size_key, record.ffn[0])
        if hasattr(config, RECORD_KEY):
            delattr(config, RECORD_KEY)
    else:
        # the stock names: transformers' pipelines accept a model by its class name alone (text-classification
        # checks it against the task's mapping names), and these classes are the stock ones plus the structure
        classes = {auto: cls.__name__ for auto, cls in autos.items()}
        code_files = write_code(directory, {cls.__name__: cls for cls in autos.values()}, record,
                                type(get_adapter(config)).__module__)
        config.auto_map = {auto: f"{MODELING}.{name}" for auto, name in classes.items()}
        setattr(config, RECORD_KEY, record.to_dict())  # as read: a damaged history entry is not carried on
    config.architectures = [type(model).__name__]
    config.save_pretrained(directory)
    # every tensor under every name: a stock loader knows nothing of ghostify's shared-layer aliases
    state = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    safetensors.torch.save_file(state, str(directory / WEIGHTS_NAME), metadata={"format": "pt"})
    copy_tokenizer(source, directory)
    if sentence_transformers is not None:
        copy_sentence_transformers(sentence_transformers, directory)
        set_embedding_dimension(directory, output_width(model))  # a cut hidden size narrows the embeddings
    return HFExport(stock=stock, auto_class=auto_class, classes=classes, code_files=code_files,
                    sentence_transformers=str(sentence_transformers) if sentence_transformers else None)


@torch.no_grad()
def output_width(model: nn.Module) -> int:
    """The width of the encoder's output (its last hidden state), as it runs: the hidden size, or what a method
    pads it back to."""
    ids = torch.ones(1, 2, dtype=torch.long, device=next(model.parameters()).device)
    output = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return int(output[0].shape[-1])


def drop_auto_map(config: Any) -> None:
    """Remove the checkpoint's own ``auto_map``: ghostify loads every model with transformers'
    classes for its ``model_type`` (no ``trust_remote_code``), so the export's classes are those
    (or ``modeling_ghostify``'s subclasses of them), and its config is transformers' own."""
    if hasattr(config, "auto_map"):
        delattr(config, "auto_map")


def write_code(directory: Path, classes: dict[str, type], record: Any, family: str) -> list[str]:
    """The modeling file, the structure entry point and the flattened structure code: of the methods ``record``
    has (and pruning's, whose widths every record states), and of the adapter module ``family`` only."""
    methods = [m for m in registered() if not m.tracked or m.present(record)]
    restores = [hook_module(m.restore) for m in methods]
    finishes = [(m, hook_module(m.finish_export), m.finish_export.function) for m in methods if m.finish_export is not None]
    modules = closure([*restores, *(module for _, module, _ in finishes), "ghostify.architectures", "ghostify.record"],
                      families=(family,))
    files = write_flat(modules, directory, families=(family,))
    imports = "\n".join(f"from .{flat_name(module)} import {m.restore.function if isinstance(m.restore, lazy) else 'restore'} "
                        f"as restore_{m.name}" for module, m in zip(restores, methods))
    imports += "".join(f"\nfrom .{flat_name(module)} import {function} as finish_{m.name}" for m, module, function in finishes)
    finish_calls = "".join(f"\n    if record.entry({m.name!r}):\n        finish_{m.name}(model)" for m, _, _ in finishes)
    (directory / f"{STRUCTURE}.py").write_text(f'''"""Written by ghostify {__version__}: rebuild the structure recorded in config.json ("{RECORD_KEY}")
on a freshly built model, method by method in ghostify's order, before its weights load."""

from .{flat_name("ghostify.architectures")} import get_adapter
from .{flat_name("ghostify.record")} import RECORD_KEY, GhostifyRecord
{imports}

RESTORES = ({", ".join(f"restore_{m.name}" for m in methods)},)


def restore_structure(model):
    config = model.config
    record = GhostifyRecord.from_dict(getattr(config, RECORD_KEY), source="config.json")
    adapter = get_adapter(config)
    source = str(getattr(config, "_name_or_path", "") or ".")
    for restore in RESTORES:
        restore(model, adapter, record, source){finish_calls}
''', encoding="utf-8")
    names = sorted(classes)
    bodies = "\n\n".join(f'''class {name}(transformers.{name}):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        restore_structure(self)''' for name in names)
    (directory / f"{MODELING}.py").write_text(f'''"""Written by ghostify {__version__} (`ghostify export --format hf`): the stock transformers classes
of this checkpoint, given the structure recorded in config.json before their weights load (named
like them, so that transformers' pipelines take them for what they are). Needs torch and
transformers only; the structure code is in the ghostify_*.py files beside it."""

import transformers

from .{STRUCTURE} import restore_structure


{bodies}
''', encoding="utf-8")
    return sorted([*files, f"{STRUCTURE}.py", f"{MODELING}.py"])


