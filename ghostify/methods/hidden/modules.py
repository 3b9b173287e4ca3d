"""Hidden-size pruning: the structural edits (see :mod:`ghostify.methods.hidden`).

Cutting channels slices every parameter that holds them (:func:`ghostify.architectures.channels.residual_parts`
finds them) and makes the config describe the result: ``hidden_size`` is the kept width, so a model built
from it has embeddings, norms, pooler and task head at that width, and the head width is written under the
family's ``head_size_key``. Families whose attention derives the head width from ``hidden_size / heads``
build their Q/K/V/O at the wrong head width from such a config: :func:`restore_attention` rebuilds them at
the recorded one and sets the attention module's head-size attributes, before the weights load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ...architectures import ArchitectureAdapter
from ...architectures.channels import ResidualParts, residual_parts


def has_projection(model: nn.Module, adapter: ArchitectureAdapter) -> bool:
    """Whether ``model``'s embeddings are narrower than the stream and mapped into it (the family's embedding
    projection exists: ELECTRA and DeBERTa-v2 build it only then, ALBERT always)."""
    path = adapter.embedding_projection
    if path is None:
        return False
    try:
        model.base_model.get_submodule(path)
    except AttributeError:
        return False
    return True


def parts_of(model: nn.Module, adapter: ArchitectureAdapter) -> ResidualParts:
    return residual_parts(model, adapter, has_projection(model, adapter))


def slice_channels(model: nn.Module, parts: ResidualParts, kept: Sequence[int]) -> None:
    """Keep only the residual channels ``kept`` (indices into the stream as it is now, increasing) in every
    module of ``parts``, in place. A parameter held by several modules (a decoder tied to the word
    embeddings) is sliced once and stays shared."""
    device = next(model.parameters()).device
    index = torch.as_tensor([int(c) for c in kept], dtype=torch.long, device=device)
    dims: dict[int, tuple[nn.Parameter, set[int]]] = {}

    def cut(param: nn.Parameter | None, dim: int) -> None:
        if param is not None:
            dims.setdefault(id(param), (param, set()))[1].add(dim)

    for linear in parts.readers:
        cut(linear.weight, 1)
    for linear in parts.writers:
        cut(linear.weight, 0)
        cut(linear.bias, 0)
    for table in parts.tables:
        cut(table.weight, 1)
    for module in parts.channelwise:
        for param in module.parameters(recurse=False):
            cut(param, 0)
    new: dict[int, nn.Parameter] = {}
    for key, (param, axes) in dims.items():
        value = param.detach()
        for axis in sorted(axes):
            value = value.index_select(axis, index.to(value.device))
        new[key] = nn.Parameter(value.clone(), requires_grad=param.requires_grad)
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and id(param) in new:
                module._parameters[name] = new[id(param)]
    set_widths(parts, len(kept))


def set_widths(parts: ResidualParts, width: int) -> None:
    """The modules' own size attributes, after their parameters were sliced to ``width`` channels."""
    for linear in parts.readers:
        linear.in_features = width
    for linear in parts.writers:
        linear.out_features = width
    for table in parts.tables:
        table.embedding_dim = width
    for module in parts.channelwise:
        if isinstance(getattr(module, "normalized_shape", None), tuple):  # LayerNorm, RMSNorm: F.layer_norm reads it
            module.normalized_shape = (width,)


def set_config(config: Any, adapter: ArchitectureAdapter, width: int, head_size: int, projection: bool) -> None:
    """Make ``config`` build a model whose residual stream is ``width`` wide and whose heads stay
    ``head_size`` wide: every config key of the hidden width where it equals it (the embeddings' too,
    when they are part of the stream)."""
    original = adapter.hidden_size(config)
    setattr(config, adapter.head_size_key, head_size)
    keys = [*adapter.hidden_width_keys, *([adapter.embedding_size_key] if adapter.embedding_size_key and not projection
                                         else [])]
    for key in keys:
        if getattr(config, key, None) == original:
            setattr(config, key, width)
    setattr(config, adapter.hidden_size_key, width)


def restore_attention(model: nn.Module, adapter: ArchitectureAdapter, head_size: int) -> None:
    """Give every layer of a model freshly built from a hidden-pruned config its attention projections at
    ``head_size`` per head (all heads: pruning's restore cuts them afterwards), and its attention module the
    head-size attributes its forward reads. A projection that the config already built right is kept."""
    config = model.config
    width = adapter.hidden_size(config)
    query_rows = adapter.num_heads(config) * head_size
    kv_rows = adapter.num_units(config) * head_size
    for layer in adapter.layers(model):
        paths = adapter.paths_for_layer(layer)
        shapes: dict[str, tuple[int, int]] = {}
        if paths.qkv:
            shapes[paths.qkv] = (query_rows + 2 * kv_rows, width)
        else:
            shapes |= {paths.query: (query_rows, width), paths.key: (kv_rows, width), paths.value: (kv_rows, width)}
        shapes |= {path: (query_rows, width) for path in paths.extra_head_outputs}
        shapes[paths.attention_output] = (width, query_rows)
        for path, (rows, columns) in shapes.items():
            old = adapter.submodule(layer, path)
            if tuple(old.weight.shape) != (rows, columns):
                adapter.set_submodule(layer, path, nn.Linear(columns, rows, bias=old.bias is not None,
                                                             device=old.weight.device, dtype=old.weight.dtype))
        set_head_size(adapter, layer.get_submodule(paths.attention), head_size, adapter.num_heads(config))


def set_head_size(adapter: ArchitectureAdapter, attention: nn.Module, head_size: int, heads: int) -> None:
    for attr in adapter.head_size_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, head_size)
    for attr in adapter.head_width_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, heads * head_size)
    for attr in adapter.head_scaling_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, head_size ** -0.5)


def add_projection(model: nn.Module, adapter: ArchitectureAdapter, embedding_width: int) -> None:
    """Build the embedding projection that a config whose hidden size came to equal ``embedding_size`` does not
    (ELECTRA builds it only when the two differ, and runs it whenever it exists)."""
    if has_projection(model, adapter):
        return
    weight = model.get_input_embeddings().weight
    projection = nn.Linear(embedding_width, adapter.hidden_size(model.config), bias=adapter.embedding_projection_bias,
                           device=weight.device, dtype=weight.dtype)
    adapter.set_submodule(model.base_model, adapter.embedding_projection, projection)


class PadChannels:
    """Forward hook of a bare encoder: its output (last hidden state and pooler output) back at the original
    ``of`` channels, the kept ones where they were and zeros at the cut ones, so that embeddings stay
    comparable with vectors of the original model. One gather with constant indices (a plain ``Gather`` in
    ONNX, which int8 quantisation leaves exact)."""

    def __init__(self, kept: Sequence[int], of: int) -> None:
        self.kept, self.of = [int(c) for c in kept], int(of)
        position = {c: i for i, c in enumerate(self.kept)}
        #: for each original channel, its column in [kept channels; one zero column]
        self.source = [position.get(c, len(self.kept)) for c in range(self.of)]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.shape[-1] != len(self.kept):
            return x
        padded = torch.cat([x, x.new_zeros(*x.shape[:-1], 1)], dim=-1)
        return padded.index_select(-1, torch.tensor(self.source, device=x.device))

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> Any:
        if isinstance(output, tuple):
            return (self.pad(output[0]), *output[1:])
        for name in ("last_hidden_state", "pooler_output"):
            value = getattr(output, name, None)
            if value is not None:
                output[name] = self.pad(value)
        return output


def pad_output(model: nn.Module, kept: Sequence[int] | None, of: int) -> None:
    """Install :class:`PadChannels` on a bare encoder (``kept`` None: remove it). A model with a task head
    keeps its output as it is: its head reads the kept channels."""
    for key, hook in list(model._forward_hooks.items()):
        if isinstance(hook, PadChannels):
            del model._forward_hooks[key]
    if kept is not None and model.base_model is model:
        model.register_forward_hook(PadChannels(kept, of))
