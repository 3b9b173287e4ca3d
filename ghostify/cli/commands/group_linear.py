from __future__ import annotations

from typing import Annotated

import typer

from ...methods.grouped.settings import MODULES
from ..app import app
from ..console import err
from ..options import Model, Output, Overwrite


@app.command(
    "group-linear",
    epilog="**Examples**\n\n"
    "ghostify group-linear out/teacher -o out/grouped --groups 4 --modules qkv,ffn  (SqueezeBERT's choice)\n\n"
    "ghostify group-linear out/pruned -o out/grouped-ffn --groups 2 --modules ffn --no-permute\n\n"
    "ghostify group-linear out/teacher -o out/g4 --groups 4 --modules qkv,o,ffn",
)
def group_linear(
    model: Model,
    output: Output,
    groups: Annotated[int, typer.Option("--groups", min=1, help="G: blocks on the diagonal; parameters and FLOPs of the grouped layers fall by G.")] = 4,
    modules: Annotated[str, typer.Option("--modules", help=f"Comma-separated, among {', '.join(MODULES)}: query/key/value, attention output, both FFN projections.")] = "qkv,ffn",
    permute: Annotated[bool, typer.Option("--permute/--no-permute", help="Reorder channels so the blocks keep the most weight norm (residual-stream orders cost a gather at run time).")] = True,
    overwrite: Overwrite = False,
) -> None:
    """Group position-wise layers (SqueezeBERT): block-diagonal 1x1 convolutions.

    Every chosen projection of every encoder layer becomes G independent blocks (out/G x in/G),
    initialised from the dense weight's diagonal blocks, so its parameters and FLOPs fall by G.
    With --permute (default) channels are first reordered so that the blocks keep as much of the
    weights' squared norm as possible: heads and FFN channels are reordered inside the weights
    for free; the residual-stream side (inputs of Q, K, V and FFN-up, outputs of O and FFN-down)
    is reordered at run time by an index gather. Distill or fine-tune the result next.
    Prune before grouping; attach-ghost after it.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    record = steps.group_linear(model, output, groups=groups, modules=modules, permute=permute, overwrite=overwrite)
    grouped = record.grouped or {}
    kept = f"{100 * grouped['kept_norm']:.1f}%"
    if grouped["permute"]:
        kept += f" with the permutation, {100 * grouped['kept_norm_identity']:.1f}% without"
    err.print(f"grouped {','.join(grouped['modules'])} into {grouped['groups']} blocks in every layer; "
              f"kept squared weight norm: {kept}")
    err.print(f"wrote {output}")
