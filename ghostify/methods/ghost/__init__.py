"""Ghost modules (GhostBERT, Huang et al., ACL 2021): cheap convolutions that generate extra
features from the remaining heads and FFN neurons of a (pruned) encoder.

The default, after the attention output projection and the FFN down projection of every layer::

    out = y + ReLU(DWConv(y, softmax(W)))      y: the projection's output, W: (d, k)

Example:
    >>> from ghostify.methods.ghost import GhostSettings, attach_ghosts, freeze_except_ghosts
    >>> from ghostify.testing import tiny_model
    >>> model = tiny_model("bert")
    >>> new = attach_ghosts(model, GhostSettings())            # 2 * layers * d * k parameters
    >>> trainable = freeze_except_ghosts(model)                 # train only the ghosts
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method
from .describe import describe
from .settings import CONVS, DEFAULT_POSITIONS, POSITIONS, GhostSettings


def _method() -> Method:
    from .restore import restore

    return Method(
        name="ghost", record_key="ghost", command="attach-ghost", noun="ghost modules",
        restore=restore,
        describe=describe,
        repeatable=False,
    )


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("attach_ghosts", "freeze_except_ghosts", "ghost_flops", "ghost_kernel_parameters",
                  "ghost_parameter_names", "ghost_params", "ghost_record", "has_ghosts"),
        "context": ("GhostContext",),
        "modules": ("GhostColumns", "GhostConv", "GhostLinear", "GhostMapConv", "GhostValue"),
        "restore": ("check_ghost_record", "restore_ghosts"),
    },
    {"METHOD": _method},
)

__all__ = [
    "CONVS",
    "DEFAULT_POSITIONS",
    "GhostColumns",
    "GhostContext",
    "GhostConv",
    "GhostLinear",
    "GhostMapConv",
    "GhostSettings",
    "GhostValue",
    "METHOD",
    "POSITIONS",
    "attach_ghosts",
    "check_ghost_record",
    "describe",
    "freeze_except_ghosts",
    "ghost_flops",
    "ghost_kernel_parameters",
    "ghost_parameter_names",
    "ghost_params",
    "ghost_record",
    "has_ghosts",
    "restore_ghosts",
]
