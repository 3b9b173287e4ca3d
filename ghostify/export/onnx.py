"""``ghostify export --format onnx [--quantize int8]``: the model as an ONNX graph for ONNX Runtime.

Exported with torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``) and dynamic batch
and sequence axes: the TorchScript exporter bakes the example's shapes into the graph, and
Optimum's exporter does not support transformers 5. Inputs are ``input_ids``, ``attention_mask``
and, where the model uses them, ``token_type_ids``; outputs are the head's (``logits``;
``start_logits``/``end_logits``), or for an encoder without a head ``last_hidden_state`` and, when
it is a sentence-transformers model, its pooled ``sentence_embedding``. Every export is checked
against PyTorch on batches of other sizes, lengths and padding than the example it was traced on.
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..architectures import get_adapter
from ..errors import GhostifyError, Terminated
from ..pooling import Pooling
from ..settings import MODULE_GROUPS

ONNX_NAME = "model.onnx"
INT8_NAME = "model_int8.onnx"
#: the largest difference from PyTorch an fp32 export may show on the check batches
TOLERANCE = 1e-4
#: outputs of a model with a head, in the order they are exported
HEAD_OUTPUTS = ("logits", "start_logits", "end_logits")
EXTRA = "pip install 'ghostify[export]'"


def require_onnx() -> None:
    """Refuse early, in one line, when the export extra is missing."""
    missing = [name for name in ("onnx", "onnxruntime", "onnxscript") if not _importable(name)]
    if missing:
        raise GhostifyError(f"ONNX export needs {', '.join(missing)}, which are not installed; run {EXTRA}")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def input_names(model: nn.Module) -> list[str]:
    """The inputs the graph takes: token type ids only where the model has more than one type."""
    accepted = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in accepted and int(getattr(model.config, "type_vocab_size", 0) or 0) > 1:
        names.append("token_type_ids")
    return names


class _Graph(nn.Module):
    """The model with named tensor inputs and a tuple of tensor outputs."""

    def __init__(self, model: nn.Module, inputs: list[str], pooling: Pooling | None):
        super().__init__()
        self.model, self.inputs, self.pooling = model, inputs, pooling
        self.outputs: list[str] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        out = self.model(**batch)
        heads = [name for name in HEAD_OUTPUTS if getattr(out, name, None) is not None]
        if heads:
            self.outputs = heads
            return tuple(getattr(out, name) for name in heads)
        hidden = out.last_hidden_state
        if self.pooling is None:
            self.outputs = ["last_hidden_state"]
            return (hidden,)
        self.outputs = ["last_hidden_state", "sentence_embedding"]
        return hidden, self.pooling(hidden, batch["attention_mask"])


def example_batch(config: Any, inputs: list[str], batch: int, length: int, *, seed: int,
                  padded: bool = True) -> dict[str, torch.Tensor]:
    """Random token ids (no special meaning needed) for a model of ``config``, with rows of
    different lengths."""
    generator = torch.Generator().manual_seed(seed)
    vocab = int(config.vocab_size)
    ids = torch.randint(5, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    if padded:
        for row in range(1, batch):
            mask[row, max(1, length - 2 * row):] = 0
    out = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in inputs:
        types = torch.zeros(batch, length, dtype=torch.long)
        types[:, length // 2:] = 1
        out["token_type_ids"] = types
    return out


@dataclass
class OnnxExport:
    inputs: list[str]
    outputs: list[str]
    max_difference: float  # fp32 graph vs PyTorch, over the check batches
    int8_difference: float | None = None  # int8 graph vs PyTorch (information: quantisation error)
    files: list[str] = field(default_factory=list)
    kept_fp32: list[str] = field(default_factory=list)  # graph nodes that --keep-fp32 left out of int8


def write_onnx(model: nn.Module, directory: Path, *, pooling: Pooling | None, quantize: str | None,
               keep_fp32: tuple[str, ...] = ()) -> OnnxExport:
    """Export ``model`` to ``directory/model.onnx`` (and ``model_int8.onnx``), checked; the modules
    that ``keep_fp32`` names (see :func:`resolve_keep_fp32`) stay fp32 in the int8 graph."""
    require_onnx()
    inputs = input_names(model)
    graph = _Graph(model.eval(), inputs, pooling).eval()
    example = example_batch(model.config, inputs, 2, 8, seed=0)
    batch_dim, sequence_dim = torch.export.Dim("batch"), torch.export.Dim("sequence")
    dynamic = {name: {0: batch_dim, 1: sequence_dim} for name in inputs}
    with torch.no_grad():
        graph(*example.values())  # names the outputs
    path = directory / ONNX_NAME
    # the exporter logs a warning per torchvision operator it cannot register; they are not ours
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(graph, tuple(example.values()), str(path), dynamo=True, dynamic_shapes=dynamic,
                              input_names=inputs, output_names=list(graph.outputs), verbose=False,
                              # one file, as ONNX Runtime's quantiser expects, unless protobuf's 2 GB limit forbids
                              external_data=_bytes(model) > 1_800_000_000)
        except Exception as exc:  # the exporter's errors are pages long; the first line says what failed
            raise GhostifyError(f"torch.onnx.export failed for this model: {_summary(exc)}; "
                                "set GHOSTIFY_DEBUG=1 for the exporter's full report") from exc
    Terminated.raise_if_arrived()  # the exporter catches broadly: a Ctrl-C during it may have been swallowed
    result = OnnxExport(inputs=inputs, outputs=list(graph.outputs), max_difference=0.0, files=[ONNX_NAME])
    result.max_difference = compare(graph, path, inputs)
    if result.max_difference > TOLERANCE:
        raise GhostifyError(f"the ONNX graph differs from PyTorch by {result.max_difference:.2e} (more than {TOLERANCE:g}) "
                            "on batches of other shapes than the export example; please report this model")
    if quantize == "int8":
        result.kept_fp32 = nodes_of_modules(path, keep_fp32)
        quantize_int8(path, directory / INT8_NAME, keep=result.kept_fp32)
        result.int8_difference = compare(graph, directory / INT8_NAME, inputs)
        result.files.append(INT8_NAME)
    return result


def _bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def check_batches(model: nn.Module, inputs: list[str]) -> list[dict[str, torch.Tensor]]:
    """Batches whose size, length and padding differ from the export example (2 x 8, padded)."""
    return [example_batch(model.config, inputs, 3, 13, seed=1), example_batch(model.config, inputs, 1, 5, seed=2, padded=False),
            example_batch(model.config, inputs, 5, 21, seed=3)]


@torch.no_grad()
def compare(graph: _Graph, path: Path, inputs: list[str]) -> float:
    """The largest absolute difference between ONNX Runtime and PyTorch over the check batches."""
    session = session_for(path)
    worst = 0.0
    for batch in check_batches(graph.model, inputs):
        expected = graph(*batch.values())
        got = session.run(None, {k: v.numpy() for k, v in batch.items()})
        for e, g in zip(expected, got, strict=True):
            worst = max(worst, float((torch.from_numpy(g) - e).abs().max()))
    return worst


def session_for(path: Path, *, threads: int | None = None, spinning: bool = True) -> Any:
    """An ONNX Runtime CPU session of ``path``; ``spinning=False`` lets its worker threads sleep as soon
    as a run ends (``bench``: sessions that take turns must not busy-wait beside the one running)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def module_group(model: nn.Module, group: str) -> list[str]:
    """The module names of one of :data:`MODULE_GROUPS` in ``model``."""
    if group == "task-head":
        base = model.base_model  # a model without a head is its own base model
        return [name for name, child in model.named_children() if child is not base] if base is not model else []
    adapter = get_adapter(model.config)
    names = {id(module): name for name, module in model.named_modules()}
    found = []
    for layer in adapter.layers(model):
        found += [names[id(adapter.submodule(layer, part))] for part in adapter.paths_for_layer(layer).group(group)]
    return found


def resolve_keep_fp32(model: nn.Module, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The ``--keep-fp32`` patterns with each :data:`MODULE_GROUPS` name replaced by its module names,
    after checking that every pattern names a module of ``model``: a module name as
    ``model.named_modules()`` gives it (``qa_outputs``, ``bert.encoder.layer.5``), an fnmatch
    pattern of names (``*.output.dense``) or a group (``task-head``); a module keeps everything
    inside it fp32."""
    names = [name for name, _ in model.named_modules() if name]
    resolved: list[str] = []
    for pattern in patterns:
        members = module_group(model, pattern) if pattern in MODULE_GROUPS else [pattern]
        if not any(fnmatch.fnmatchcase(name, member) for name in names for member in members):
            examples = ", ".join([*module_group(model, "task-head")[:1], *module_group(model, "ffn-down")[:1]])
            raise GhostifyError(f"--keep-fp32 {pattern!r} names no module of this {type(model).__name__}; give module "
                                f"names or fnmatch patterns of them, comma-separated, e.g. {examples} or '*.output.dense', "
                                f"or one of {', '.join(MODULE_GROUPS)}")
        resolved += members
    return tuple(dict.fromkeys(resolved))


def nodes_of_modules(path: Path, patterns: tuple[str, ...]) -> list[str]:
    """The nodes of the exported graph ``path`` that the modules ``patterns`` name computed, from the
    module scopes torch's exporter records on each node (``pkg.torch.onnx.name_scopes``)."""
    if not patterns:
        return []
    import ast

    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found = []
    for node in graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None)
        if scopes is None or not node.name:
            continue
        # the scopes are module paths of the wrapper (_Graph): its model sits under "model."
        modules = [s.removeprefix("model.") for s in ast.literal_eval(scopes) if s.startswith("model.")]
        if any(fnmatch.fnmatchcase(m, p) for m in modules for p in patterns):
            found.append(node.name)
    return found


def quantize_int8(source: Path, target: Path, *, keep: list[str] | tuple[str, ...] = ()) -> None:
    """ONNX Runtime dynamic quantisation (int8 weights, activations quantised at run time), after
    the pre-processing ONNX Runtime recommends (symbolic shape inference and graph optimisation);
    the nodes named in ``keep`` stay fp32 (its ``nodes_to_exclude``: pre-processing keeps names)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = target.with_name(target.stem + ".prep.onnx")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # ONNX shape inference and graph optimisation; the symbolic shape inference cannot follow
            # the dynamo exporter's symbolic dimensions and adds nothing for dynamic quantisation
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8,
                             nodes_to_exclude=[*_grouped_convolutions(prepared), *keep])
    except Exception as exc:  # ONNX Runtime's tools raise anything; say where it happened
        raise GhostifyError(f"ONNX Runtime int8 quantisation failed: {_summary(exc)}; the fp32 export is fine "
                            "(drop --quantize)") from exc
    finally:
        prepared.unlink(missing_ok=True)


def _grouped_convolutions(path: Path) -> list[str]:
    """The grouped ``Conv`` nodes (depthwise ghost modules), which stay fp32: as ``ConvInteger``
    they would lose ONNX Runtime's blocked-layout kernel, its fused ReLU and the reorders that
    replace their transposes, and quantising a 3-tap kernel saves nothing worth its error."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [node.name for node in model.graph.node if node.op_type == "Conv" and node.name
            and any(a.name == "group" and a.i > 1 for a in node.attribute)]


def _summary(exc: BaseException) -> str:
    """The line of the exporter's report that says what failed."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    after = next((i for i, line in enumerate(lines) if "Exception summary" in line), None)
    return (lines[after + 1] if after is not None and after + 1 < len(lines) else lines[0] if lines else type(exc).__name__)[:300]
