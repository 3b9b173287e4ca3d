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
from ..base import Method
from .describe import describe
from .settings import MODULES, check_groups, module_widths, parse_modules


def _method() -> Method:
    from .restore import restore

    return Method(
        name="grouped", record_key="grouped", command="group-linear", noun="grouped layers",
        restore=restore,
        describe=describe,
        before=("ghost",),  # ghost projections wrap plain linear layers
        repeatable=False,
    )


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("group_linear", "grouped_record"),
        "modules": ("GroupedLinear",),
        "restore": ("restore_grouped",),
    },
    {"METHOD": _method},
)

__all__ = [
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
