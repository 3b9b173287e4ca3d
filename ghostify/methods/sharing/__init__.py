"""Cross-layer parameter sharing (ALBERT, Lan et al. 2020): the encoder's L layers split into G
contiguous groups, every layer of a group running ONE module (the same object, so the same
tensors), initialised from the group's layers.

Generic code sees shared layers the way it sees ALBERT's: ``adapter.layers()`` lists the distinct
modules, ``adapter.layer_applications()`` how often each runs. A checkpoint stores each shared
tensor once (``checkpoint.alias_keys``) and ``load_model`` rebuilds the sharing from
``record.entry("sharing")`` before anything else.

Two kinds of family, told apart by the adapter's ``config_groups`` fact: most run one layer slot
per step (``layers_path``), and sharing puts one module into several slots; ALBERT's config itself
shares groups of layers (``config_groups``), and sharing rebuilds those groups and rewrites the
config's group count, so only equal groups are possible.
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe, describe_groups
from .settings import INITS, ShareSettings, distinct_layers, plan_groups

METHOD = Method(
    name="sharing", tag="shared-layers", command="share-layers", noun="shared layers", settings=ShareSettings,
    check=lazy("ghostify.methods.sharing.apply:check"),
    apply=lazy("ghostify.methods.sharing.apply:apply"),
    restore=lazy("ghostify.methods.sharing.restore:restore"),
    describe=describe,
    distinct_layers=distinct_layers,
    # save_pretrained writes a shared tensor once, as a tie: the exported model declares its shared tensors
    finish_export=lazy("ghostify.methods.sharing.modules:declare_shared_tensors"),
    # averaging layers needs them unchanged otherwise: ghosts, grouping and references add modules
    before=("ghost", "grouped", "references"),
    help="""Share parameters across layers (ALBERT): G groups of contiguous layers, one layer each.

    Every layer of a group runs the same module (the same tensors, stored once), initialised from
    the group's layers. Share before prune and attach-ghost; recover with `ghostify distill`
    (teacher: the unshared model).
    """,
    examples=(
        "ghostify share-layers out/teacher -o out/shared --groups 1  (ALBERT's all-shared encoder)",
        "ghostify share-layers out/teacher -o out/shared3 --groups 3 --init first",
        "ghostify share-layers out/shared3 -o out/pruned ... then prune / attach-ghost / distill as usual",
    ),
)


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("check_shareable", "share"),
        "restore": ("restore_sharing",),
    },
)

__all__ = [
    "INITS",
    "METHOD",
    "ShareSettings",
    "check_shareable",
    "describe",
    "describe_groups",
    "distinct_layers",
    "plan_groups",
    "restore_sharing",
    "share",
]
