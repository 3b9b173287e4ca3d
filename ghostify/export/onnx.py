"""The model as an ONNX graph: ONNX Runtime's graph (``export --format onnx``), and what every other graph
runtime converts to its own (``ghostify.runtimes``); then the runtime's int8 graph, each checked.

Exported with torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``) and dynamic batch
and sequence axes: the TorchScript exporter bakes the example's shapes into the graph, and
Optimum's exporter does not support transformers 5. Inputs are ``input_ids``, ``attention_mask``
and, where the model uses them, ``token_type_ids``; outputs are the head's (``logits``;
``start_logits``/``end_logits``), or for an encoder without a head ``last_hidden_state`` and, when
it is a sentence-transformers model, its pooled ``sentence_embedding``. Every export is checked
against PyTorch, in the runtime it is for, on batches of other sizes, lengths and padding than the
example it was traced on.
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..architectures import get_adapter
from ..errors import GhostifyError, Terminated
from ..pooling import Pooling
from ..runtimes import Runtime
from ..settings import MODULE_GROUPS

#: the largest difference from PyTorch a full-precision export may show on the check batches (fp32 arithmetic)
TOLERANCE = 1e-4
#: outputs of a model with a head, in the order they are exported
HEAD_OUTPUTS = ("logits", "start_logits", "end_logits")


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
class GraphExport:
    inputs: list[str]
    outputs: list[str]
    max_difference: float  # the full-precision graph (fp32 arithmetic) vs PyTorch, over the check batches
    int8_difference: float | None = None  # int8 graph vs PyTorch (information: quantisation error)
    files: list[str] = field(default_factory=list)
    kept_fp32: list[str] = field(default_factory=list)  # graph nodes that --keep-fp32 left out of int8
    #: the precision the runtime computes the full-precision graph in by default on this CPU where it is not fp32
    #: ("bf16"), and that graph's difference from PyTorch then (information: what ships)
    reduced_precision: str | None = None
    reduced_difference: float | None = None


def write_graph(model: nn.Module, directory: Path, runtime: Runtime, *, pooling: Pooling | None, quantize: str | None,
                keep_fp32: tuple[str, ...] = (), calibration: Sequence[Mapping[str, Any]] = ()) -> GraphExport:
    """Export ``model`` to ``runtime``'s graph in ``directory`` (and its int8 graph), checked: the ONNX graph
    first (which is ONNX Runtime's graph, and what other runtimes convert); the modules that ``keep_fp32`` names
    (see :func:`resolve_keep_fp32`) stay in floating point in the int8 graph, which a calibrated runtime
    quantises on ``calibration`` (input batches)."""
    runtime.require(export=True)
    inputs = input_names(model)
    graph = _Graph(model.eval(), inputs, pooling).eval()
    with tempfile.TemporaryDirectory(prefix="ghostify-onnx-") as scratch:
        onnx_file = directory / runtime.graph if runtime.convert is None else Path(scratch) / "model.onnx"
        write_onnx(graph, onnx_file)
        kept = nodes_of_modules(onnx_file, keep_fp32) if quantize == "int8" else []
        keep = node_outputs(onnx_file, kept)  # a converted graph may rename a node: its outputs find it
        if runtime.convert is not None:
            runtime.convert(onnx_file, directory / runtime.graph)
    path = directory / runtime.graph
    result = GraphExport(inputs=inputs, outputs=list(graph.outputs), max_difference=0.0, files=[runtime.graph],
                         kept_fp32=kept)
    result.max_difference = compare(graph, path, inputs, runtime, precision="f32")
    if result.max_difference > TOLERANCE:
        raise GhostifyError(f"the {runtime.title} graph differs from PyTorch by {result.max_difference:.2e} (more than "
                            f"{TOLERANCE:g}) on batches of other shapes than the export example; please report this model")
    result.reduced_precision = runtime.reduced_precision()
    if result.reduced_precision is not None:
        result.reduced_difference = compare(graph, path, inputs, runtime)
    if quantize == "int8":
        runtime.quantize(path, directory / runtime.int8_graph, calibration=calibration, keep=keep)
        result.int8_difference = compare(graph, directory / runtime.int8_graph, inputs, runtime)
        result.files.append(runtime.int8_graph)
    return result


def write_onnx(graph: _Graph, path: Path) -> None:
    """The ONNX graph of ``graph`` at ``path``, with dynamic batch and sequence axes."""
    example = example_batch(graph.model.config, graph.inputs, 2, 8, seed=0)
    batch_dim, sequence_dim = torch.export.Dim("batch"), torch.export.Dim("sequence")
    dynamic = {name: {0: batch_dim, 1: sequence_dim} for name in graph.inputs}
    with torch.no_grad():
        graph(*example.values())  # names the outputs
    # the exporter logs a warning per torchvision operator it cannot register; they are not ours
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(graph, tuple(example.values()), str(path), dynamo=True, dynamic_shapes=dynamic,
                              input_names=graph.inputs, output_names=list(graph.outputs), verbose=False,
                              # one file, as ONNX Runtime's quantiser expects, unless protobuf's 2 GB limit forbids
                              external_data=_bytes(graph.model) > 1_800_000_000)
        except Exception as exc:  # the exporter's errors are pages long; the first line says what failed
            raise GhostifyError(f"torch.onnx.export failed for this model: {_summary(exc)}; "
                                "set GHOSTIFY_DEBUG=1 for the exporter's full report") from exc
    Terminated.raise_if_arrived()  # the exporter catches broadly: a Ctrl-C during it may have been swallowed


def _bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def check_batches(model: nn.Module, inputs: list[str]) -> list[dict[str, torch.Tensor]]:
    """Batches whose size, length and padding differ from the export example (2 x 8, padded)."""
    return [example_batch(model.config, inputs, 3, 13, seed=1), example_batch(model.config, inputs, 1, 5, seed=2, padded=False),
            example_batch(model.config, inputs, 5, 21, seed=3)]


@torch.no_grad()
def compare(graph: _Graph, path: Path, inputs: list[str], runtime: Runtime, *, precision: str | None = None) -> float:
    """The largest absolute difference between ``runtime`` running ``path`` (at ``precision``; None: the
    runtime's default on this CPU) and PyTorch over the check batches, at the real tokens of per-token outputs
    (what a model computes at padding is no output: ModernBERT's differs between runtimes)."""
    session = runtime.load(path, precision=precision)
    worst = 0.0
    for batch in check_batches(graph.model, inputs):
        expected = graph(*batch.values())
        got = session.run({k: v.numpy() for k, v in batch.items()})
        mask = batch["attention_mask"].bool()
        for e, g in zip(expected, got, strict=True):
            difference = (torch.from_numpy(g) - e).abs()
            if difference.shape[:2] == mask.shape:  # one value (or vector) per token
                difference = difference[mask]
            worst = max(worst, float(difference.max()))
    return worst


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


def node_outputs(path: Path, nodes: Sequence[str]) -> dict[str, list[str]]:
    """The output tensors of each of ``nodes`` in the ONNX graph ``path``, by node name."""
    if not nodes:
        return {}
    import onnx

    wanted = set(nodes)
    graph = onnx.load(str(path), load_external_data=False).graph
    return {node.name: list(node.output) for node in graph.node if node.name in wanted}


def _summary(exc: BaseException) -> str:
    """The line of the exporter's report that says what failed."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    after = next((i for i, line in enumerate(lines) if "Exception summary" in line), None)
    return (lines[after + 1] if after is not None and after + 1 < len(lines) else lines[0] if lines else type(exc).__name__)[:300]
