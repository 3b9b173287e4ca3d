"""Grouped position-wise layers (SqueezeBERT, Iandola et al., 2020).

A fully-connected layer applied to every token is a 1x1 convolution; with G groups its weight is
block-diagonal: output block g (out/G channels) reads only input block g (in/G channels), so
parameters and FLOPs fall by G. ``group_linear`` replaces the chosen projections of every encoder
layer by :class:`GroupedLinear` modules initialised from the dense weights' diagonal blocks.

Which channels share a block is free to choose. ``permute=True`` searches for the balanced
co-clustering of rows and columns that keeps most of the weights' squared Frobenius norm in the
blocks (alternating balanced assignment, best seen kept). Channel orders that neighbouring weights
can absorb cost nothing: the heads (rows of Q, K, V with the columns of O; whole heads, so Q and
K keep one order within each head and MPNet/DeBERTa position terms follow through pruning's
``set_heads``) and the FFN's intermediate channels (rows of FFN-up with the columns of FFN-down)
are reordered in the dense weights. Orders of the residual stream (inputs of Q, K, V and FFN-up,
outputs of O and FFN-down) change what neighbouring LayerNorms and residual sums see, so they are
applied at run time by an index gather whose index is a buffer saved with the weights (Q, K and V
share one input order and one gather).
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe
from .settings import MODULES, GroupSettings, check_groups, module_widths, parse_modules

METHOD = Method(
    name="grouped", tag="grouped-linear", command="group-linear", noun="grouped layers", settings=GroupSettings,
    check=lazy("ghostify.methods.grouped.apply:check"),
    apply=lazy("ghostify.methods.grouped.apply:apply"),
    restore=lazy("ghostify.methods.grouped.restore:restore"),
    describe=describe,
    before=("ghost",),  # ghost projections wrap plain linear layers
    repeatable=False,
    help="""Group position-wise layers (SqueezeBERT): block-diagonal 1x1 convolutions.

    Every chosen projection of every encoder layer becomes G independent blocks (out/G x in/G),
    initialised from the dense weight's diagonal blocks, so its parameters and FLOPs fall by G.
    With --permute (default) channels are first reordered so that the blocks keep as much of the
    weights' squared norm as possible: heads and FFN channels are reordered inside the weights
    for free; the residual-stream side (inputs of Q, K, V and FFN-up, outputs of O and FFN-down)
    is reordered at run time by an index gather. Distill or fine-tune the result next.
    Prune before grouping; attach-ghost after it.
    """,
    examples=(
        "ghostify group-linear out/teacher -o out/grouped --groups 4 --modules qkv,ffn  (SqueezeBERT's choice)",
        "ghostify group-linear out/pruned -o out/grouped-ffn --groups 2 --modules ffn --no-permute",
        "ghostify group-linear out/teacher -o out/g4 --groups 4 --modules qkv,o,ffn",
    ),
)


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("group_linear", "grouped_record"),
        "modules": ("GroupedLinear",),
        "restore": ("restore_grouped",),
    },
)

__all__ = [
    "GroupSettings",
    "GroupedLinear",
    "METHOD",
    "MODULES",
    "check_groups",
    "describe",
    "group_linear",
    "grouped_record",
    "module_widths",
    "parse_modules",
    "restore_grouped",
]
