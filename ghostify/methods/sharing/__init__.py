"""Cross-layer parameter sharing (ALBERT, Lan et al. 2020): the encoder's L layers split into G
contiguous groups, every layer of a group running ONE module (the same object, so the same
tensors), initialised from the group's layers.

Generic code sees shared layers the way it sees ALBERT's: ``adapter.layers()`` lists the distinct
modules, ``adapter.layer_applications()`` how often each runs. A checkpoint stores each shared
tensor once (``checkpoint.alias_keys``) and ``load_model`` rebuilds the sharing from
``record.sharing`` before anything else.

Two kinds of family, told apart by the adapter's ``config_groups`` fact: most run one layer slot
per step (``layers_path``), and sharing puts one module into several slots; ALBERT's config itself
shares groups of layers (``config_groups``), and sharing rebuilds those groups and rewrites the
config's group count, so only equal groups are possible.
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method
from .describe import describe
from .settings import INITS, distinct_layers, plan_groups


def _method() -> Method:
    from .restore import restore

    return Method(
        name="sharing", record_key="sharing", command="share-layers", noun="shared layers",
        restore=restore,
        describe=describe,
        # averaging layers needs them unchanged otherwise: ghosts, grouping and references add modules
        before=("ghost", "grouped", "references"),
    )


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("check_shareable", "share", "describe_groups"),
        "restore": ("restore_sharing",),
    },
    {"METHOD": _method},
)

__all__ = [
    "INITS",
    "METHOD",
    "check_shareable",
    "describe",
    "describe_groups",
    "distinct_layers",
    "plan_groups",
    "restore_sharing",
    "share",
]
