"""Checkpoint directories: HF ``config.json`` with the ghostify record, ``model.safetensors``,
tokenizer files and any extra artefacts (importance scores, ...), written atomically (the file
handling itself is :mod:`ghostify.files`).

``load_model`` rebuilds the structure from the record first (after checking the record against
the config) and then loads the weights strictly: a key that is missing, unexpected or of the
wrong shape is an error, never a silent re-init. Plain transformers checkpoints get the same
strictness from transformers' loading report; only a task head the checkpoint lacks entirely is
freshly initialised, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import pickle
import re
import socket
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import safetensors.torch  # save_file looked up per call: a full disk is simulated by patching it
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn

from .architectures import get_adapter
from .card import checkpoint_facts, write_card
from .errors import CheckpointError, GhostifyError
from .files import atomic_directory, check_source, copy_tokenizer, link_input, looks_like_path, path_inside
from .methods import distinct_layers, restore_all, save_all, validate_record
from .record import RECORD_KEY, GhostifyRecord

# transformers is imported inside the functions that use it (marked "deferred"): its import takes
# seconds, and `import ghostify` (the CLI's --help, record-only commands) should not pay for it.


WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

#: model heads a checkpoint can be loaded with (``head=``), by their ghostify name
HEAD_CLASSES = {
    "base": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "masked-lm": "AutoModelForMaskedLM",
}


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------
def is_local(source: str | os.PathLike) -> bool:
    return Path(source).exists()


def load_config(source: str | os.PathLike, **overrides: Any):
    """The HF config of a local directory or hub id, with a one-line error when it is unusable."""
    from transformers import AutoConfig  # deferred

    source = str(source)
    path = Path(source)
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(f"{source} is a file, not a checkpoint directory; pass the directory that holds config.json")
        if not (path / CONFIG_NAME).is_file():
            raise CheckpointError(f"no config.json in {source}: not a model checkpoint directory")
        try:
            json.loads((path / CONFIG_NAME).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"corrupt config.json in {source}: {exc}; restore or re-create the checkpoint") from exc
    elif looks_like_path(source):
        check_source(source)
    else:
        _check_hub_reachable(source)
    try:
        return AutoConfig.from_pretrained(source, **overrides)
    except (OSError, ValueError, KeyError) as exc:
        if not path.exists() and "connect" in str(exc).lower():
            raise _unreachable(source) from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"cannot load the config of {source}: {first}") from exc


#: the longest the reachability check of the hub waits for a connection, in seconds
HUB_PROBE_TIMEOUT = 5.0


def _check_hub_reachable(source: str) -> None:
    """Refuse at once a hub id when the hub cannot be reached: transformers would retry for
    minutes before failing (HF_HUB_OFFLINE=1 reads the cache and skips this)."""
    from huggingface_hub import constants  # deferred with transformers (reads HF_ENDPOINT, HF_HUB_OFFLINE)

    if constants.HF_HUB_OFFLINE or _proxied():
        return  # offline: the cache answers; behind a proxy a direct connection says nothing
    timeout = min(HUB_PROBE_TIMEOUT, float(constants.HF_HUB_ETAG_TIMEOUT))
    if not _reachable(constants.ENDPOINT, timeout):
        raise _unreachable(source)


def _unreachable(source: str) -> CheckpointError:
    from huggingface_hub import constants  # deferred

    return CheckpointError(f"cannot reach the Hugging Face hub ({constants.ENDPOINT}) for {source!r}: no network "
                           "connection; pass a local directory, or set HF_HUB_OFFLINE=1 to use the cache")


def _proxied() -> bool:
    return any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"))


@functools.lru_cache(maxsize=None)
def _reachable(endpoint: str, timeout: float) -> bool:
    """Whether a TCP connection to ``endpoint`` opens within ``timeout`` seconds (once per process)."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    if not parts.hostname:
        return True  # not a URL this check understands: let the hub client try
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def read_record(config) -> GhostifyRecord | None:
    """The checkpoint's record, checked against its config (a tampered record is refused here,
    before any module is built from it)."""
    data = getattr(config, RECORD_KEY, None)
    if data is None:
        return None
    name = str(getattr(config, "_name_or_path", "") or "")
    source = str(Path(name) / CONFIG_NAME) if name else CONFIG_NAME
    record = GhostifyRecord.from_dict(data, source=source)
    adapter = get_adapter(config)
    validate_record(record, config, source)  # every method's entry: known, not newer, not tampered with
    record.check_structure(
        source,
        num_heads=adapter.num_units(config),
        ffn_size=adapter.ffn_size(config),
        num_layers=_distinct_layers(config, adapter, record),
    )
    return record


def max_positions(config) -> int:
    """Rows of the model's position table (a bound for ghost kernels); the longest input is
    ``architectures.usable_positions``."""
    return get_adapter(config).max_positions(config)


def _distinct_layers(config, adapter, record: GhostifyRecord) -> int | None:
    """How many distinct layers the config builds (the record lists one entry per distinct layer)."""
    try:
        return distinct_layers(config, adapter, record)
    except (AttributeError, TypeError, ValueError):
        return None  # the rebuild's own check names the problem


def _auto_class(config, head: str | None):
    import transformers  # deferred

    if head is None:
        architectures = getattr(config, "architectures", None) or []
        for name in architectures:
            cls = getattr(transformers, name, None)
            if cls is not None:
                return cls
        return transformers.AutoModel
    if head not in HEAD_CLASSES:
        raise GhostifyError(f"unknown model head {head!r}; choose one of {', '.join(HEAD_CLASSES)}")
    if head not in available_heads(config):
        raise GhostifyError(f"transformers has no {head} head for {config.model_type} models; choose one of "
                            f"{', '.join(available_heads(config))}")
    return getattr(transformers, HEAD_CLASSES[head])


def available_heads(config) -> list[str]:
    """The task heads transformers ships for ``config``'s family (EuroBERT, GTE and NomicBERT have no
    question-answering head, say)."""
    import transformers  # deferred

    return [head for head, auto in HEAD_CLASSES.items() if type(config) in getattr(transformers, auto)._model_mapping]


def load_model(
    source: str | os.PathLike,
    *,
    head: str | None = None,
    num_labels: int | None = None,
    problem_type: str | None = None,
    attn_implementation: str | None = None,
    dropout: float | None = None,
    attention_dropout: float | None = None,
) -> nn.Module:
    """Load a model from a ghostify checkpoint, a plain HF directory or a hub id.

    Returns the transformers class of the checkpoint (or of ``head``: ``"base"``,
    ``"sequence-classification"``, ...). A pruned checkpoint gets its per-layer structure from
    its record before the weights are loaded strictly. ``dropout`` / ``attention_dropout`` replace
    the config's dropout probabilities (hidden states and task head / attention probabilities).

    Example:
        >>> model = load_model("out/pruned")                       # doctest: +SKIP
        >>> model = load_model("out/pruned", head="sequence-classification", num_labels=2)  # doctest: +SKIP
    """
    overrides: dict[str, Any] = {}
    if num_labels is not None:
        overrides["num_labels"] = num_labels
    if problem_type is not None:
        overrides["problem_type"] = problem_type
    config = load_config(source, **overrides)
    adapter = get_adapter(config)
    adapter.set_dropout(config, dropout, attention_dropout)
    record = read_record(config)
    cls = _auto_class(config, head)
    kwargs: dict[str, Any] = {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation

    if record is None:
        # a plain transformers checkpoint: its config describes its structure completely, and
        # its weights must match it as strictly as a ghostify checkpoint's
        model = _load_plain(cls, source, config, kwargs, expected_class=_auto_class(config, None),
                            encoder_fallback=head is None)
        model.eval()
        return model

    weights = Path(source) / WEIGHTS_NAME
    if not weights.is_file():
        raise CheckpointError(f"no {WEIGHTS_NAME} in {source}: the checkpoint is incomplete; re-create or re-download the checkpoint")
    check_safetensors(weights)
    for name, entry in record.methods.items():  # a method's files are read from the checkpoint itself, never elsewhere
        if isinstance(entry.get("file"), str):
            path_inside(source, entry["file"], f"config.json {name}.file")
    with _quiet_transformers():
        build = getattr(cls, "from_config", None) or cls._from_config  # Auto classes / model classes
        model = build(config, **kwargs)
    restore_all(model, adapter, record, str(source))  # every recorded structural change, in the registry's order
    _load_weights_strictly(model, weights, expected_class=_auto_class(config, None))
    model.eval()
    return model


def _load_weights_strictly(model: nn.Module, path: Path, expected_class) -> None:
    """Load ``path`` into ``model``: every encoder weight must be there with its recorded shape.

    Only when the model is loaded with another head than it was saved with (a bare encoder into
    a classification model, say) may task-head weights be missing (freshly initialised, with a
    warning) or left over (dropped)."""
    try:
        state = _align_prefix(load_file(str(path)), model)
    except (SafetensorError, ValueError) as exc:
        raise CheckpointError(f"corrupt weights file {path}: {exc}; re-create or re-download the checkpoint") from exc
    own = model.state_dict()
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    aliases = alias_keys(model)  # filled through the shared modules (share-layers)
    missing = [k for k in own if k not in state and k not in tied and k not in aliases]
    unexpected = [k for k in state if k not in own]
    if type(model) is not expected_class:
        prefix = model.base_model_prefix + "."
        is_encoder = (lambda key: True) if model.base_model is model else (lambda key: key.startswith(prefix))
        fresh = [k for k in missing if not is_encoder(k)]
        missing = [k for k in missing if is_encoder(k)]
        unexpected = [k for k in unexpected if is_encoder(k) and model.base_model is not model]
        if fresh:
            warnings.warn(
                f"{len(fresh)} task-head weights are not in the checkpoint and were freshly initialised "
                f"({fresh[0]}, ...): train the head (ghostify finetune) before relying on its outputs",
                stacklevel=3,
            )
    if missing or unexpected:
        raise CheckpointError(f"weights in {path} do not match the recorded structure: {_mismatch(missing, unexpected)}")
    for key, tensor in state.items():
        if key in own and own[key].shape != tensor.shape:
            raise CheckpointError(
                f"weights in {path} do not match the recorded structure: {key} has shape "
                f"{tuple(tensor.shape)}, the record builds {tuple(own[key].shape)}"
            )
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    if tied:
        model.tie_weights()


#: weight files transformers reads from a local directory, in its order of preference
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
PICKLE_FIX = ("convert it to safetensors in a trusted environment with transformers' "
              "save_pretrained(..., safe_serialization=True), or re-download the checkpoint")


def check_safetensors(path: Path) -> None:
    """A one-line error for an empty, truncated or corrupt safetensors file (its header covers
    every tensor's bytes, so reading it finds a cut-off file without loading the tensors)."""
    if path.stat().st_size == 0:
        raise CheckpointError(f"corrupt weights file {path}: it is empty (0 bytes), the checkpoint was not written "
                              "completely; re-create or re-download the checkpoint")
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except (SafetensorError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"corrupt weights file {path}: truncated or damaged ({detail}); "
                              "re-create or re-download the checkpoint") from exc


def _check_plain_weights(directory: Path) -> None:
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    if not present:
        raise CheckpointError(f"no {WEIGHTS_NAME} (nor pytorch_model.bin) in {directory}: the checkpoint has no weights; "
                              "re-create or re-download the checkpoint")
    if present[0] == WEIGHTS_NAME:
        check_safetensors(directory / WEIGHTS_NAME)


def _pickle_error(source, exc: BaseException) -> CheckpointError:
    """torch's unpickling refusal, without its advice to load untrusted pickles unsafely."""
    match = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
    what = f"it references {match.group(1)}" if match else "it holds more than plain tensors"
    path = Path(str(source)) / "pytorch_model.bin" if is_local(source) else source
    return CheckpointError(f"{path} is a pickle checkpoint that is unsafe to load ({what}); {PICKLE_FIX}")


def _load_plain(cls, source, config, kwargs: dict[str, Any], *, expected_class, encoder_fallback: bool = False) -> nn.Module:
    """``from_pretrained`` with transformers' loading report turned into strict checks.

    ``encoder_fallback`` (no head asked for): a checkpoint whose config.json names a class with a
    head but whose weights hold none of the head's tensors (sentence-transformers models saved
    from ``AutoModel`` with ``architectures: [...ForMaskedLM]``) is loaded as the bare encoder,
    as transformers' ``AutoModel`` and sentence-transformers do, with a warning; the encoder's
    weights are then checked as strictly as any."""
    if is_local(source):
        _check_plain_weights(Path(source))
    try:
        with _quiet_transformers():
            model, info = cls.from_pretrained(str(source), config=config, output_loading_info=True,
                                              ignore_mismatched_sizes=True, **kwargs)
    except pickle.UnpicklingError as exc:
        raise _pickle_error(source, exc) from None
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        if "weights_only" in str(exc):
            raise _pickle_error(source, exc) from None
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
            raise  # not the checkpoint's fault: the CLI says which permissions to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"cannot load the weights of {source}: {first}") from exc
    if encoder_fallback and _holds_no_head(model, info):
        import transformers  # deferred

        encoder_class = transformers.AutoModel._model_mapping[type(config)]
        encoder = _load_plain(encoder_class, source, config, kwargs, expected_class=encoder_class)
        warnings.warn(f"{source} names {type(model).__name__} but holds only the encoder's weights: loaded the "
                      f"encoder ({encoder_class.__name__})", stacklevel=4)
        return encoder
    _check_loading_info(model, info, source, same_class=type(model) is expected_class)
    return model


def _holds_no_head(model: nn.Module, info: dict[str, Any]) -> bool:
    """Whether ``model`` has a task head of which the checkpoint held not one tensor (a head with
    some tensors present and others missing is a damaged checkpoint, not an encoder)."""
    if model.base_model is model:
        return False
    prefix = model.base_model_prefix + "."
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    head = [k for k in model.state_dict() if not k.startswith(prefix) and k not in tied]
    missing = set(info.get("missing_keys", ()))  # a mis-shaped head tensor is present, hence not missing
    return bool(head) and all(k in missing for k in head)


def _check_loading_info(model: nn.Module, info: dict[str, Any], source, *, same_class: bool) -> None:
    """Refuse what transformers would re-initialise or drop silently.

    With the class the checkpoint was saved as, every missing, unexpected or mis-shaped tensor is
    an error. With another head (a bare encoder into a classifier), a component the checkpoint
    lacks entirely (the task head, a pooler) is freshly initialised with a warning and another
    head's tensors are dropped; a gap inside a component it has is still an error."""
    base = model.base_model
    prefix = model.base_model_prefix
    children = dict(base.named_children())
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})

    def encoder_part(key: str) -> str | None:
        """``key`` relative to the encoder, or None for a task-head key."""
        if key.startswith(prefix + "."):
            return key[len(prefix) + 1 :]
        return key if key.split(".")[0] in children else None  # a bare encoder's keys have no prefix

    def component(key: str) -> str:
        rel = encoder_part(key)
        return f"{prefix}.{rel.split('.')[0]}" if rel is not None else key.split(".")[0]

    missing = sorted(k for k in info.get("missing_keys", ()) if k not in tied)
    loaded = {component(k) for k in model.state_dict() if k not in missing and k not in tied}
    bad_missing = [k for k in missing if same_class or component(k) in loaded]
    fresh = [k for k in missing if k not in bad_missing]
    unexpected = []
    for key in sorted(info.get("unexpected_keys", ())):
        rel = encoder_part(key)
        if rel is not None:
            # an encoder part this head leaves out (BertForMaskedLM's pooler is None) is not an error
            if getattr(base, rel.split(".")[0], _ABSENT) is not None and not rel.endswith("position_ids"):
                unexpected.append(key)
        elif same_class and _has_module(model, key.rpartition(".")[0]):
            unexpected.append(key)
    shapes = []
    for key, saved, built in sorted(info.get("mismatched_keys", ()), key=lambda item: item[0]):
        if same_class or encoder_part(key) is not None:
            shapes.append(f"{key} has shape {tuple(saved)} in the checkpoint, the config builds {tuple(built)}")
        else:
            fresh.append(key)
    where = f"the weights of {source} do not match its config.json"
    if shapes:
        raise CheckpointError(f"{where}: {shapes[0]}{f' (and {len(shapes) - 1} more)' if len(shapes) > 1 else ''}; "
                              "re-create or re-download the checkpoint")
    if bad_missing or unexpected:
        raise CheckpointError(f"{where}: {_mismatch(bad_missing, unexpected)}; re-create or re-download the checkpoint")
    if fresh:
        warnings.warn(
            f"{len(fresh)} task-head weights are not in the checkpoint and were freshly initialised "
            f"({fresh[0]}, ...): train the head (ghostify finetune) before relying on its outputs",
            stacklevel=4,
        )


_ABSENT = object()


def _has_module(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path) if path else model
        return True
    except AttributeError:
        return False


def _align_prefix(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """Map between a bare encoder's keys and a task model's ``<prefix>.`` keys, either way."""
    own = set(model.state_dict())
    prefix = model.base_model_prefix + "."
    aligned = {}
    for key, value in state.items():
        if key not in own and prefix + key in own:
            key = prefix + key
        elif key not in own and key.startswith(prefix) and key[len(prefix) :] in own:
            key = key[len(prefix) :]
        aligned[key] = value
    return aligned


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers logs every freshly initialised weight; ghostify says it once itself."""
    from transformers.utils import logging as hf_logging  # deferred

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def model_record(model: nn.Module) -> GhostifyRecord:
    """The record of a loaded model (from its config, or describing it as it is)."""
    record = read_record(model.config)
    return record if record is not None else GhostifyRecord.of_model(model, get_adapter(model.config))


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
def save_checkpoint(
    model: nn.Module,
    output: str | os.PathLike,
    record: GhostifyRecord,
    *,
    tokenizer_source: str | os.PathLike | None = None,
    extra_files: dict[str, Callable[[Path], None]] | None = None,
    overwrite: bool = False,
    weights_from: str | os.PathLike | None = None,
) -> Path:
    """Write ``model`` with ``record`` as a checkpoint directory, atomically.

    ``extra_files`` maps a file name to a function that writes it (e.g. importance scores).
    ``weights_from``: the checkpoint ``model`` was loaded from, unchanged; its weights file is
    hard-linked instead of written when it holds exactly the tensors that would be written.
    """
    with atomic_directory(output, overwrite=overwrite) as tmp:
        write_checkpoint(model, tmp, record, tokenizer_source=tokenizer_source, extra_files=extra_files,
                         weights_from=weights_from)
    return Path(output)


def write_checkpoint(
    model: nn.Module,
    directory: Path,
    record: GhostifyRecord,
    *,
    tokenizer_source: str | os.PathLike | None = None,
    extra_files: dict[str, Callable[[Path], None]] | None = None,
    weights_from: str | os.PathLike | None = None,
    state: dict[str, torch.Tensor] | None = None,
) -> None:
    """The files of a checkpoint, into an existing directory (callers provide the atomicity).
    ``state``: the model's tensors when the model does not hold them whole (gathered from the
    shards of a sharded training run), named as its ``state_dict`` names them."""
    save_all(model, directory, record)  # every method's files beside the weights (the reference store)
    config = model.config
    setattr(config, RECORD_KEY, record.to_dict())
    config.architectures = [type(model).__name__]
    config.save_pretrained(directory)
    skip = set(getattr(model, "all_tied_weights_keys", {}) or {}) | set(alias_keys(model))  # each tensor once
    tensors = model.state_dict() if state is None else state
    state = {k: v.detach().contiguous().cpu() for k, v in tensors.items() if k not in skip}
    source = Path(weights_from) / WEIGHTS_NAME if weights_from is not None else None
    if source is None or not source.is_file() or not _holds_exactly(source, state):
        safetensors.torch.save_file(_unshare(state), str(directory / WEIGHTS_NAME), metadata={"format": "pt"})
    else:
        link_input(source, directory / WEIGHTS_NAME)
    if tokenizer_source is not None:
        copy_tokenizer(tokenizer_source, directory)
    for name, writer in (extra_files or {}).items():
        writer(directory / name)
    write_model_card(directory)


def write_model_card(directory: Path) -> None:
    """The checkpoint's ``README.md`` (a Hugging Face model card, :mod:`ghostify.card`) from what
    ``directory`` holds: its record, sizes measured on the model loaded back from it, and
    ``training.json``'s evaluations once training wrote them (the loop calls this again then).

    The sizes are measured on a fresh copy, never the caller's model (a student mid-training keeps
    its attention kernel and state untouched), and building it leaves the global RNG as it was
    (training goes on drawing the same numbers)."""
    with torch.random.fork_rng(devices=[]):
        model = load_model(directory)
    write_card(directory, checkpoint_facts(model, directory, model_record(model)))


def _holds_exactly(path: Path, state: dict[str, torch.Tensor]) -> bool:
    """Whether the safetensors file ``path`` holds the tensors of ``state``: the same keys, dtypes,
    shapes and values (then it can stand for the file that would be written)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != set(state):
                return False
            for key, tensor in state.items():
                stored = f.get_tensor(key)
                if stored.dtype != tensor.dtype or stored.shape != tensor.shape or not torch.equal(stored, tensor):
                    return False
    except (OSError, SafetensorError, ValueError):
        return False
    return True


def alias_keys(model: nn.Module) -> dict[str, str]:
    """State-dict keys that name a parameter or buffer already listed under an earlier key
    (a layer module shared by several steps, a tied weight), each mapped to that earlier key.

    They are not written: loading the earlier key fills them, since the rebuilt model shares the
    same module or tensor."""
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    # the targets of transformers' ties come last, so that their sources stay the stored keys
    items = sorted(model.state_dict(keep_vars=True).items(), key=lambda item: item[0] in tied)
    first: dict[int, str] = {}
    aliases = {}
    for key, value in items:
        if id(value) in first:
            aliases[key] = first[id(value)]
        else:
            first[id(value)] = key
    return aliases


def _unshare(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory; give each key its own copy."""
    seen: set[int] = set()
    out = {}
    for key, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr()
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out


def _mismatch(missing: list[str], unexpected: list[str]) -> str:
    """``missing [...]; unexpected [...]``, the first three keys of each, for an error line."""
    what = [f"{label} {keys[:3]}{' ...' if len(keys) > 3 else ''}"
            for label, keys in (("missing", missing), ("unexpected", unexpected)) if keys]
    return "; ".join(what)
