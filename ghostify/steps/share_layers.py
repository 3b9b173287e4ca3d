"""``ghostify share-layers``: ALBERT's cross-layer parameter sharing in contiguous groups."""

from __future__ import annotations

import os
import warnings

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record, read_record, save_checkpoint
from ..errors import GhostifyError
from ..files import check_output_dir
from ..methods import check_order
from ..methods.sharing.apply import share
from ..methods.sharing.settings import INITS, plan_groups
from ..record import GhostifyRecord, history_entry


def share_layers(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    groups: int,
    init: str = "mean",
    overwrite: bool = False,
) -> GhostifyRecord:
    """Split the encoder's L layers into ``groups`` contiguous groups that each run ONE layer,
    initialised from the group's layers (``init``: element-wise ``mean`` or the ``first``), and
    write the model to ``output``. When ``groups`` does not divide L the groups differ by one
    layer, the larger first (ALBERT, which shares through its config, needs a divisor).

    Example:
        >>> share_layers("out/teacher", "out/shared", groups=3)  # doctest: +SKIP
    """
    if init not in INITS:
        raise GhostifyError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    out = check_output_dir(output, overwrite=overwrite, inputs=(model,))
    config = load_config(model)
    adapter = get_adapter(config)
    plan = plan_groups(adapter, config, groups)  # refuses a bad --groups before loading weights
    check_order("sharing", read_record(config))  # ghosts, grouped layers, references: refused before loading
    if len(plan) == adapter.num_layers(config):
        warnings.warn(f"--groups {groups} gives every layer its own group: nothing is shared", stacklevel=2)
    net = load_model(model)
    new_record = share(net, adapter, model_record(net), groups, init)
    new_record.history.append(history_entry("share-layers", {"model": str(model), "groups": groups, "init": init}))
    save_checkpoint(net, out, new_record, tokenizer_source=model, overwrite=overwrite)
    return new_record
