"""Installing ghost modules on a model: every target resolved and checked, and every new module
built, before the model is touched (like peft's injection), so a failure never leaves a
half-ghosted model. Targets come from the architecture adapter's per-layer paths; nothing here
names a Hugging Face submodule. ``attach-ghost`` calls it through ``apply``, and ``restore``
rebuilds a checkpoint's ghosts with it (this module, not ``apply``, is what an export carries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...attention import use_attention_kernel
from ...errors import GhostifyError
from ...seeding import generator
from ..grouped.modules import GroupedLinear
from .context import GhostContext
from .modules import GhostColumns, GhostConv, GhostLinear, GhostMapConv, GhostValue, ghost_projection
from .settings import ATTENTION_POSITIONS, GhostSettings


#: modules that own ghost parameters
GHOST_PARAM_MODULES = (GhostConv, GhostMapConv, GhostColumns)


#: the modules among them whose parameters are kernels (and their output scales)
GHOST_KERNEL_MODULES = (GhostConv, GhostMapConv)


#: the attribute names ghost modules are attached under (FLOPs are attributed to these)
GHOST_CHILD_NAMES = ("ghost", "ghost_heads", "ghost_qk", "ghost_v")


@dataclass
class _Edit:
    """One pending change: replace ``layer.<path>`` or add a child to ``layer.<path>``."""

    layer: nn.Module
    path: str
    module: nn.Module
    child: str | None = None  # set: add ``module`` as this child of the module at ``path``


def ghost_parameter_names(model: nn.Module) -> list[str]:
    """Names (as in ``model.named_parameters()``) of the ghost modules' parameters.

    Example:
        >>> optimizer = torch.optim.AdamW(
        ...     [p for n, p in model.named_parameters() if n in set(ghost_parameter_names(model))])  # doctest: +SKIP
    """
    names = []
    for name, _ in model.named_parameters():
        owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        if isinstance(owner, GHOST_PARAM_MODULES):
            names.append(name)
    return names


def has_ghosts(model: nn.Module) -> bool:
    return any(isinstance(m, (GhostLinear, GhostValue, *GHOST_PARAM_MODULES)) for m in model.modules())


def install(model: nn.Module, adapter: ArchitectureAdapter, settings: GhostSettings, seed: int) -> None:
    """Plan every change (resolving and checking all targets, building all modules), then apply."""
    if has_ghosts(model):
        raise GhostifyError(
            "the model already has ghost modules; attach to the model without them (ghostify attach-ghost reads a "
            "checkpoint and writes a new one, so use its input)"
        )
    config = model.config
    check_family(adapter, settings, getattr(config, "model_type", "?"))
    context = GhostContext.for_encoder(model.base_model)
    build = _Builder(settings, context, seed)
    edits = [edit for index, layer in enumerate(adapter.layers(model)) for edit in _plan_layer(adapter, config, layer, index, build)]
    if "v" in settings.positions and not any(edit.child == "ghost_v" for edit in edits):
        raise no_pruned_heads(adapter.num_heads(config))

    # nothing above modified the model; from here on nothing can fail
    for edit in edits:
        if edit.child is None:
            adapter.set_submodule(edit.layer, edit.path, edit.module)
        else:
            attention = adapter.submodule(edit.layer, edit.path)
            attention.add_module(edit.child, edit.module)  # a hook of ghostify's attention kernel
            use_attention_kernel(attention, config)
    context.install(model.base_model)


class _Builder:
    """Builds the ghost modules of one attach call, with one generator seeded from the command's
    seed for all kernels (deterministic initial values for F > 1 and ghost heads)."""

    def __init__(self, settings: GhostSettings, context: GhostContext, seed: int) -> None:
        self.settings, self.context = settings, context
        self.generator = generator(seed)

    def conv(self, channels: int, like: nn.Linear, *, parts: int = 1, outputs: int = 1,
             starts_at_zero: bool = False) -> GhostConv:
        """``starts_at_zero``: the module's output already enters through zero weights (the ghost
        value heads' columns), so init "zero-scale" adds no scale: a second zero factor would give
        neither of them a gradient."""
        s = self.settings
        init = "uniform" if starts_at_zero and s.init == "zero-scale" else s.init
        module = GhostConv(channels, kernel_size=s.kernel_size, conv=s.conv, softmax=s.softmax, relu=s.relu,
                           features=s.features, parts=parts, outputs=outputs, init=init, device=like.weight.device,
                           dtype=like.weight.dtype)
        module.reset_parameters(self.generator)
        return module

    def maps(self, heads: int, like: nn.Linear) -> GhostMapConv:
        s = self.settings
        module = GhostMapConv(heads, kernel_size=s.kernel_size, softmax=s.softmax, relu=s.relu, features=s.features,
                              init=s.init, context=self.context, device=like.weight.device, dtype=like.weight.dtype)
        module.reset_parameters(self.generator)
        return module


def _plan_layer(adapter: ArchitectureAdapter, config: Any, layer: nn.Module, index: int, build: _Builder) -> list[_Edit]:
    """The changes to one encoder layer (nothing is modified here)."""
    settings, context = build.settings, build.context
    positions = set(settings.positions)
    paths = adapter.paths_for_layer(layer)
    head_size = adapter.head_size(config)
    num_heads = adapter.num_heads(config)
    o_proj = _linear(adapter, layer, paths.attention_output, index)
    if o_proj.in_features % head_size:
        raise GhostifyError(
            f"layer {index}: the output projection takes {o_proj.in_features} features, not a multiple of the "
            f"head size {head_size}; the model's structure does not match its config"
        )
    kept = o_proj.in_features // head_size  # query heads (grouped-query attention: whole groups of them)
    parts = kept if settings.per_head else 1  # heads (FFN folds) with their own kernels
    edits: list[_Edit] = []
    ghost_heads = None
    if "v" in positions and num_heads > kept:
        _attention(adapter, layer, paths.attention, index)
        value = GhostValue(build.conv(head_size, o_proj, parts=parts, outputs=num_heads - kept, starts_at_zero=True),
                           context)
        edits.append(_Edit(layer, paths.attention, value, child="ghost_v"))
        ghost_heads = GhostColumns(o_proj.out_features, (num_heads - kept) * head_size, device=o_proj.weight.device,
                                   dtype=o_proj.weight.dtype)
    if "o" in positions or ghost_heads is not None:
        ghost = build.conv(o_proj.out_features, o_proj, parts=parts) if "o" in positions else None
        edits.append(_Edit(layer, paths.attention_output, ghost_projection(o_proj, context, ghost, parts=parts, ghost_heads=ghost_heads)))
    if "qk" in positions:
        _attention(adapter, layer, paths.attention, index)
        edits.append(_Edit(layer, paths.attention, build.maps(parts, o_proj), child="ghost_qk"))
    if "ffn1" in positions:
        up = _linear(adapter, layer, paths.ffn_up, index)
        edits.append(_Edit(layer, paths.ffn_up, ghost_projection(up, context, build.conv(up.out_features, up))))
    if "ffn2" in positions:
        down = _linear(adapter, layer, paths.ffn_down, index)
        ghost = build.conv(down.out_features, down, parts=parts)
        edits.append(_Edit(layer, paths.ffn_down, ghost_projection(down, context, ghost, parts=parts)))
    return edits


def check_family(adapter: ArchitectureAdapter, settings: GhostSettings, model_type: str) -> None:
    """Refuse positions the model family cannot take (from the config alone)."""
    attention = [p for p in settings.positions if p in ATTENTION_POSITIONS]
    if attention and not adapter.uses_attention_interface:
        raise GhostifyError(
            f"--positions {','.join(attention)} needs attention that goes through transformers' AttentionInterface, "
            f"which {model_type} models do not use; choose among o, ffn1, ffn2 for this model"
        )


def no_pruned_heads(num_heads: int) -> GhostifyError:
    return GhostifyError(
        f"--positions v regenerates the values of pruned heads, but every layer keeps all {num_heads} heads; "
        "prune first (ghostify prune) or drop v"
    )


def _linear(adapter: ArchitectureAdapter, layer: nn.Module, path: str, index: int) -> nn.Linear:
    try:
        module = adapter.submodule(layer, path)
    except AttributeError as exc:
        raise GhostifyError(f"layer {index} has no submodule {path!r}; the model does not match its family's layout") from exc
    if isinstance(module, GhostLinear):
        raise GhostifyError(f"layer {index}: {path} already has ghost modules; attach to the model without them")
    if not isinstance(module, (nn.Linear, GroupedLinear)):
        raise GhostifyError(f"layer {index}: {path} is a {type(module).__name__}, not a Linear; ghost modules wrap Linear projections")
    return module


def _attention(adapter: ArchitectureAdapter, layer: nn.Module, path: str, index: int) -> nn.Module:
    module = adapter.submodule(layer, path)
    if not hasattr(module, "config"):
        raise GhostifyError(
            f"layer {index}: the attention module {path} ({type(module).__name__}) has no config to route through "
            "ghostify's attention function; choose among o, ffn1, ffn2"
        )
    return module
