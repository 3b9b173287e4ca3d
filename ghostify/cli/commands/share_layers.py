from __future__ import annotations

from typing import Annotated

import typer

from ...methods.sharing import INITS
from ..app import app
from ..console import err, human
from ..options import Model, Output, Overwrite


@app.command(
    "share-layers",
    epilog="**Examples**\n\n"
    "ghostify share-layers out/teacher -o out/shared --groups 1  (ALBERT's all-shared encoder)\n\n"
    "ghostify share-layers out/teacher -o out/shared3 --groups 3 --init first\n\n"
    "ghostify share-layers out/shared3 -o out/pruned ... then prune / attach-ghost / distill as usual",
)
def share_layers(
    model: Model,
    output: Output,
    groups: Annotated[int, typer.Option("--groups", help="G contiguous groups of layers, each running one set of parameters (sizes differ by at most one when G does not divide the layers; ALBERT needs a divisor).", show_default=False)],
    init: Annotated[str, typer.Option("--init", help=f"{' or '.join(INITS)}: a group's layer starts from the element-wise mean of its layers, or from its first layer.")] = "mean",
    overwrite: Overwrite = False,
) -> None:
    """Share parameters across layers (ALBERT): G groups of contiguous layers, one layer each.

    Every layer of a group runs the same module (the same tensors, stored once), initialised from
    the group's layers. Share before prune and attach-ghost; recover with `ghostify distill`
    (teacher: the unshared model).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    record = steps.share_layers(model, output, groups=groups, init=init, overwrite=overwrite)
    from ...methods.sharing import describe_groups

    s = record.sharing or {}
    err.print(
        f"shared: {describe_groups(s)}; parameters {human(s['params_before'])} -> {human(s['params_after'])} "
        f"({s['params_before'] - s['params_after']:,} fewer)"
    )
    err.print(f"wrote {output}")
