"""``ghostify group-linear``: SqueezeBERT's grouped position-wise layers."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record, read_record, save_checkpoint
from ..files import check_output_dir
from ..methods import check_order
from ..methods.grouped.apply import group_linear as group_in_place
from ..methods.grouped.apply import grouped_record
from ..methods.grouped.settings import check_groups, module_widths, parse_modules
from ..record import GhostifyRecord, history_entry


def group_linear(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    groups: int = 4,
    modules: str | Sequence[str] = "qkv,ffn",
    permute: bool = True,
    overwrite: bool = False,
) -> GhostifyRecord:
    """Replace the chosen projections of every encoder layer by grouped ones (G blocks on the
    diagonal, initialised from the dense weights' blocks) and write the result to ``output``.

    ``modules``: ``qkv`` (query, key, value), ``o`` (attention output), ``ffn`` (both FFN
    projections). ``permute`` first reorders channels so that the blocks keep as much of the
    weights' squared norm as possible (``record.grouped["kept_norm"]``, against
    ``kept_norm_identity`` without reordering).

    Example:
        >>> group_linear("out/teacher", "out/grouped", groups=4, modules="qkv,ffn")  # doctest: +SKIP
    """
    names = parse_modules(modules)
    out = check_output_dir(output, overwrite=overwrite, inputs=(model,))
    config = load_config(model)
    record = read_record(config)
    check_order("grouped", record)
    get_adapter(config)
    check_groups(groups, module_widths(config, record, names))
    net = load_model(model)
    record = model_record(net)
    result = group_in_place(net, get_adapter(net.config), record, groups=groups, modules=names, permute=permute)
    record.grouped = grouped_record(result)
    record.history.append(history_entry("group-linear", {"model": str(model), "groups": groups, "modules": ",".join(names),
                                                        "permute": permute}))
    save_checkpoint(net, out, record, tokenizer_source=model, overwrite=overwrite)
    return record
