"""Ghost modules (GhostBERT, Huang et al., ACL 2021): cheap convolutions that generate extra
features from the remaining heads and FFN neurons of a (pruned) encoder.

The default, after the attention output projection and the FFN down projection of every layer::

    out = y + ReLU(DWConv(y, softmax(W)))      y: the projection's output, W: (d, k)

Example:
    >>> from ghostify.ghost import GhostSettings, attach_ghosts, freeze_except_ghosts
    >>> from ghostify.testing import tiny_model
    >>> model = tiny_model("bert")
    >>> new = attach_ghosts(model, GhostSettings())            # 2 * layers * d * k parameters
    >>> trainable = freeze_except_ghosts(model)                 # train only the ghosts
"""

from __future__ import annotations

from .context import GhostContext
from .inject import (
    attach_ghosts,
    check_ghost_record,
    freeze_except_ghosts,
    ghost_flops,
    ghost_parameter_names,
    ghost_params,
    ghost_record,
    has_ghosts,
    restore_ghosts,
)
from .modules import GhostColumns, GhostConv, GhostLinear, GhostMapConv, GhostValue
from .settings import CONVS, DEFAULT_POSITIONS, POSITIONS, GhostSettings

__all__ = [
    "CONVS",
    "DEFAULT_POSITIONS",
    "POSITIONS",
    "GhostColumns",
    "GhostContext",
    "GhostConv",
    "GhostLinear",
    "GhostMapConv",
    "GhostSettings",
    "GhostValue",
    "attach_ghosts",
    "check_ghost_record",
    "freeze_except_ghosts",
    "ghost_flops",
    "ghost_parameter_names",
    "ghost_params",
    "ghost_record",
    "has_ghosts",
    "restore_ghosts",
]
