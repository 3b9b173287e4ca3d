from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...methods.pruning import ALLOCATIONS
from ..app import app
from ..console import err
from ..options import Model, Output, Overwrite
from ..summary import print_structure

Width = Annotated[Optional[str], typer.Option("--width", help="Width multiplier for heads and FFN: 0.25 or 3/12.", show_default=False)]


@app.command(
    epilog="**Examples**\n\n"
    "ghostify prune out/scored -o out/pruned --width 3/12\n\n"
    "ghostify prune bert-base-uncased -o out/bert-quarter --width 0.25\n\n"
    "ghostify prune out/scored -o out/pruned --heads-width 6/12 --ffn-width 0.25 --allocation global"
)
def prune(
    model: Model,
    output: Output,
    width: Width = None,
    heads_width: Annotated[Optional[str], typer.Option("--heads-width", help="Width for heads only (overrides --width).", show_default=False)] = None,
    ffn_width: Annotated[Optional[str], typer.Option("--ffn-width", help="Width for FFN neurons only (overrides --width).", show_default=False)] = None,
    importance: Annotated[Optional[str], typer.Option("--importance", help="Scores file (or directory) from `ghostify importance`; default: the ones in MODEL.", show_default=False)] = None,
    allocation: Annotated[str, typer.Option("--allocation", help=f"{' or '.join(ALLOCATIONS)}: same width in every layer, or one ranking across layers (per-layer normalised).")] = "uniform",
    overwrite: Overwrite = False,
) -> None:
    """Physically prune heads and FFN neurons to a width multiplier m.

    Keeps floor(N_H * m) heads and round(m * d_ff) neurons per layer (widths are relative to the
    original architecture), the most important first, by the scores of `ghostify importance`
    (or weight magnitude, with a warning, when there are none). The result is a dense, smaller
    model that `ghostify.load_model` rebuilds exactly.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    record = steps.prune(
        model,
        output,
        width=width,
        heads_width=heads_width,
        ffn_width=ffn_width,
        importance=importance,
        allocation=allocation,
        overwrite=overwrite,
    )
    print_structure(record)
    err.print(f"wrote {output}")
