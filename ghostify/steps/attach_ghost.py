"""``ghostify attach-ghost``: add GhostBERT ghost modules to every encoder layer."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, max_positions, model_record, read_record, save_checkpoint
from ..files import check_output_dir
from ..methods import check_order
from ..methods.ghost import GhostSettings, attach_ghosts, ghost_record
from ..methods.ghost.apply import check_family, no_pruned_heads
from ..methods.ghost.settings import DEFAULT_POSITIONS
from ..record import GhostifyRecord, history_entry
from ..seeding import check_seed


def attach_ghost(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    kernel_size: int = 3,
    softmax: bool = True,
    relu: bool = True,
    features: int = 1,
    per_head: bool = False,
    conv: str = "dwconv",
    positions: str | Sequence[str] = DEFAULT_POSITIONS,
    init: str = "uniform",
    seed: int = 0,
    overwrite: bool = False,
) -> GhostifyRecord:
    """Attach ghost modules to ``model`` (pruned or not) and write it to ``output``.

    The defaults are the paper's: after the attention output projection and the FFN down
    projection of every layer, ``y + ReLU(DWConv(y, softmax(W)))`` with a kernel of 3 tokens and
    one kernel shared by all heads (2 * layers * hidden * 3 new parameters). ``init`` chooses how
    the kernels start: ``uniform`` (the paper's), ``center`` or ``zero-scale`` (not in the paper;
    see :data:`ghostify.methods.ghost.settings.INIT_HELP`).

    Example:
        >>> attach_ghost("out/pruned", "out/ghost")                                   # doctest: +SKIP
        >>> attach_ghost("out/pruned", "out/ghost-k5", kernel_size=5, positions="o,ffn2,ffn1")  # doctest: +SKIP
    """
    settings = GhostSettings(
        kernel_size=kernel_size,
        softmax=softmax,
        relu=relu,
        features=features,
        per_head=per_head,
        conv=conv,
        positions=positions,
        init=init,
    )
    check_seed(seed)
    out = check_output_dir(output, overwrite=overwrite, inputs=(model,))
    config = load_config(model)
    _check_model(config, settings)
    net = load_model(model)
    record = model_record(net)
    attach_ghosts(net, settings, seed=seed)
    record.ghost = ghost_record(net, settings)
    record.history.append(history_entry("attach-ghost", {"model": str(model), **settings.to_dict(), "seed": seed}))
    save_checkpoint(net, out, record, tokenizer_source=model, overwrite=overwrite)
    return record


def _check_model(config, settings: GhostSettings) -> None:
    """What can be refused from the config alone, before loading any weights."""
    adapter = get_adapter(config)
    record = read_record(config)
    check_order("ghost", record)
    check_family(adapter, settings, config.model_type)
    settings.check_model(max_positions=max_positions(config))
    units = adapter.num_units(config)
    if "v" in settings.positions and (record is None or all(h >= units for h in record.heads_per_layer)):
        raise no_pruned_heads(adapter.num_heads(config))
