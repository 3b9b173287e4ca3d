"""Where a residual channel's weights sit, for every family, written once (the hidden-size counterpart of
:mod:`~ghostify.architectures.projections`).

A channel of the residual stream (one of the ``hidden_size`` features every layer reads and writes) owns:

* inside each encoder layer, as the adapter's :class:`~ghostify.architectures.base.LayerPaths` states
  them: an input column of every projection that reads the stream (Q, K and V or the fused ``qkv``,
  DeBERTa's relative-position projections, which read the relative embeddings of the same width, the
  FFN's up and gate projections) and an output row, with its bias, of the two that write it (the
  attention output and the FFN down projection); and its entry in every per-channel module of the layer
  (LayerNorm, RMSNorm: every parameter has one entry per channel);
* outside the layers, found by module type because task heads differ per class: a column of every
  embedding table of hidden width (word, position, token type, DeBERTa's relative positions), a column
  of every ``nn.Linear`` that reads hidden width and a row of every one that writes it (a pooler or a
  head's dense layer, both; a classifier, the input; ELECTRA's embedding projection, the output), and
  its entry in every per-channel module (the embeddings' and the final norm, a head's norm).

Embeddings narrower than the stream that a projection maps into it (ALBERT, ELECTRA and DeBERTa-v2
with ``embedding_size`` < ``hidden_size``: ``adapter.embedding_projection``) keep their width: only the
projection's outputs are channels. A module of hidden width that none of these describes (DeBERTa-v2's
convolution, say) is refused by name, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from .base import ArchitectureAdapter


class HiddenWidthError(ValueError):
    """A module of hidden width that no channel rule describes (the message names it)."""


@dataclass
class ResidualParts:
    """The modules of a model that hold residual channels, as it is now (see the module's docstring)."""

    #: the stream's width now
    width: int
    #: linear layers that read the stream: their input columns are channels
    readers: list[nn.Linear] = field(default_factory=list)
    #: linear layers that write it: their output rows (and biases) are channels
    writers: list[nn.Linear] = field(default_factory=list)
    #: embedding tables of hidden width: their columns
    tables: list[nn.Embedding] = field(default_factory=list)
    #: per-channel modules (norms): every parameter
    channelwise: list[nn.Module] = field(default_factory=list)
    #: modules whose hidden-width output is one tensor for the whole batch (``adapter.shared_hidden_modules``)
    shared: list[nn.Module] = field(default_factory=list)
    #: the embedding projection (a writer), or None when the embeddings are part of the stream
    projection: nn.Module | None = None
    #: the readers inside the encoder layers (their first calls are the stream's, per example)
    layer_readers: list[nn.Linear] = field(default_factory=list)

    @property
    def producers(self) -> list[nn.Module]:
        """Every module whose output is a hidden-width tensor (what a channel gate multiplies)."""
        return unique([*self.writers, *self.tables, *self.channelwise])


def unique(modules: list[nn.Module]) -> list[nn.Module]:
    return list({id(m): m for m in modules}.values())


def is_channelwise(module: nn.Module, width: int) -> bool:
    """Whether every parameter of ``module`` itself is one entry per channel (a norm's weight and bias)."""
    params = list(module.parameters(recurse=False))
    return bool(params) and all(p.dim() == 1 and p.shape[0] == width for p in params)


def _has_width(module: nn.Module, width: int) -> bool:
    return any(width in p.shape for p in module.parameters(recurse=False))


def residual_parts(model: nn.Module, adapter: ArchitectureAdapter, projection: bool) -> ResidualParts:
    """Every module of ``model`` that holds residual channels. ``projection``: whether the embeddings are
    narrower than the stream and mapped into it (``adapter.embedding_projection``; the caller knows it from
    the model's original widths). Raises :class:`HiddenWidthError` for a hidden-width module no rule covers."""
    config = model.config
    width = adapter.hidden_size(config)
    parts = ResidualParts(width=width)
    base = model.base_model
    names = {id(m): n for n, m in model.named_modules()}
    inside_layers: set[int] = set()
    for layer in adapter.layers(model):
        paths = adapter.paths_for_layer(layer)
        readers = [*paths.head_outputs, *paths.ffn_inputs]
        for path in readers:
            parts.readers.append(adapter.submodule(layer, path))
            parts.layer_readers.append(adapter.submodule(layer, path))
        for path in (paths.attention_output, paths.ffn_down):
            parts.writers.append(adapter.submodule(layer, path))
        listed = {id(adapter.submodule(layer, p)) for p in (*readers, paths.attention_output, paths.ffn_down)}
        for module in layer.modules():
            inside_layers.add(id(module))
            if id(module) in listed or not _has_width(module, width):
                continue
            if is_channelwise(module, width):
                parts.channelwise.append(module)
            else:
                raise HiddenWidthError(f"{names[id(module)]} ({type(module).__name__}) inside an encoder layer has "
                                       "parameters of hidden width that are not its listed projections")
    # the embeddings: narrower ones mapped in by a projection are left alone, but for the projection's outputs
    skipped: set[int] = set()
    if projection:
        mapped = base.get_submodule(adapter.embedding_projection)
        parts.projection = mapped
        parts.writers.append(mapped)
        skipped = {id(mapped)} | {id(m) for path in adapter.embedding_paths for m in base.get_submodule(path).modules()
                                  if _present(base, path)}
    shared = {id(base.get_submodule(p)) for p in adapter.shared_hidden_modules if _present(base, p)}
    for module in model.modules():
        if id(module) in inside_layers or id(module) in skipped:
            continue
        if isinstance(module, nn.Embedding):  # rows are tokens, positions or buckets (MPNet's, one column per head)
            if module.embedding_dim == width:
                parts.tables.append(module)
        elif isinstance(module, nn.Linear):
            if module.in_features == width:
                parts.readers.append(module)
            if module.out_features == width:
                parts.writers.append(module)
        elif not _has_width(module, width):
            continue
        elif is_channelwise(module, width):
            parts.channelwise.append(module)
        else:
            raise HiddenWidthError(f"{names[id(module)] or type(model).__name__} ({type(module).__name__}) has "
                                   "parameters of hidden width that no channel rule describes")
        if id(module) in shared:
            parts.shared.append(module)
    parts.readers, parts.writers = unique(parts.readers), unique(parts.writers)
    return parts


def _present(base: nn.Module, path: str) -> bool:
    try:
        base.get_submodule(path)
    except AttributeError:
        return False
    return True
