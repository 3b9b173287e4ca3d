"""Attach ghost modules to any supported encoder (``attach-ghost``'s check and apply), their record
entry, and the selection of their parameters (what training and ``info`` ask of them); the
installing itself is :mod:`.install`."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...architectures import get_adapter
from ...record import GhostifyRecord
from ..base import Context, Entry
from ...errors import GhostifyError
from .install import GHOST_CHILD_NAMES, GHOST_KERNEL_MODULES, check_family, ghost_parameter_names, install, no_pruned_heads
from .settings import GhostSettings

GHOST_RECORD_FORMAT = 1


def attach_ghosts(model: nn.Module, settings: GhostSettings | None = None, *, seed: int = 0) -> list[str]:
    """Attach ghost modules to every encoder layer of ``model`` in place.

    Returns the names of the new parameters, relative to ``model.base_model`` (the names the
    checkpoint record lists). Right after attaching, each ghost feature is ReLU of the uniform
    k-token moving average of its input (see :func:`ghostify.methods.ghost.modules.init_kernels`).

    Example:
        >>> from ghostify.testing import tiny_model
        >>> model = tiny_model("bert")
        >>> names = attach_ghosts(model, GhostSettings(kernel_size=3))
        >>> names[0]
        'encoder.layer.0.attention.output.dense.ghost.weight'
    """
    settings = settings or GhostSettings()
    adapter = get_adapter(model.config)
    install(model, adapter, settings, seed)
    return ghost_parameter_names(model.base_model)


def ghost_record(model: nn.Module, settings: GhostSettings) -> dict[str, Any]:
    """What ``record.entry("ghost")`` stores: the settings, and which parameters are new (and how many)."""
    names = ghost_parameter_names(model.base_model)
    params = dict(model.base_model.named_parameters())
    return {
        "format": GHOST_RECORD_FORMAT,
        "settings": settings.to_dict(),
        "params": int(sum(params[n].numel() for n in names)),
        "parameters": names,
    }


# ----------------------------------------------------------------------------------------------
# which parameters are ghosts (for training only them)
# ----------------------------------------------------------------------------------------------


def freeze_except_ghosts(model: nn.Module) -> list[str]:
    """Train only the ghost modules: ``requires_grad`` off for every other parameter.

    Returns the names left trainable. Raises when the model has no ghost modules.

    Example:
        >>> trainable = freeze_except_ghosts(model)  # doctest: +SKIP
    """
    ghosts = set(ghost_parameter_names(model))
    if not ghosts:
        raise GhostifyError("the model has no ghost modules to train; run `ghostify attach-ghost` first")
    for name, param in model.named_parameters():
        param.requires_grad_(name in ghosts)
    return sorted(ghosts)


def ghost_kernel_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The ghost kernels and scales of ``model``, each once: what ``--ghost-learning-rate`` trains.

    Not the ghost heads' output columns (position ``v``): they are ordinary projection weights,
    trained at the model's rate like the output projection they extend.

    Example:
        >>> kernels = {id(p) for p in ghost_kernel_parameters(model)}  # doctest: +SKIP
    """
    found: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, GHOST_KERNEL_MODULES):
            found.update((id(p), p) for p in module.parameters(recurse=False))
    return list(found.values())


def ghost_params(model: nn.Module) -> int:
    """How many parameters the ghost modules add (0 without ghosts)."""
    params = dict(model.named_parameters())
    return int(sum(params[n].numel() for n in ghost_parameter_names(model)))


def ghost_flops(flop_counts: dict[str, dict[Any, int]]) -> int:
    """The ghost modules' share of a ``FlopCounterMode.get_flop_counts()`` breakdown."""
    return int(
        sum(sum(ops.values()) for name, ops in flop_counts.items() if name.rpartition(".")[2] in GHOST_CHILD_NAMES)
    )


# ----------------------------------------------------------------------------------------------
# planning and installing
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: GhostifyRecord | None, settings: GhostSettings) -> None:
    """What can be refused from the config alone, before loading any weights."""
    adapter = get_adapter(config)
    check_family(adapter, settings, config.model_type)
    settings.check_model(max_positions=adapter.max_positions(config))
    units = adapter.num_units(config)
    if "v" in settings.positions and (record is None or all(h >= units for h in record.heads_per_layer)):
        raise no_pruned_heads(adapter.num_heads(config))


def apply(model: nn.Module, record: GhostifyRecord, settings: GhostSettings, context: Context) -> Entry:
    attach_ghosts(model, settings, seed=context.seed)
    data = ghost_record(model, settings)
    return Entry(format=data.pop("format"), data=data)


def measure(model: nn.Module, flop_counts: Any) -> dict[str, Any]:
    """The ghost modules' share of ``ghostify info``'s parameters and FLOPs (included in both)."""
    return {"ghost_params": ghost_params(model), "ghost_flops": ghost_flops(flop_counts)}
