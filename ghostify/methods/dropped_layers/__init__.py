"""Dropped layers (depth pruning): keep N of a model's L layers and remove the others, as
DistilBERT's students start from every other teacher layer (Sanh et al. 2019), sentence-transformers'
adaptive layers truncate an encoder, and CoFi's layer masks drop whole layers (Xia et al. 2022).

Which layers go is decided by loss impact: ``ghostify importance`` also scores each layer through a
gate on its whole residual update, ``out = x + g · (layer(x) − x)`` at ``g = 1``, the mean over
examples of ``|dL/dg|`` (the layer scores in ``importance.safetensors``); ``drop-layers --keep N``
keeps the N best-scoring layers, and without scores N evenly spaced ones. The result is a stock
model with a smaller layer count (``num_hidden_layers``), rebuilt from its config alone; the record
keeps which original layers remain (``methods.dropped_layers``: ``kept``, ``of``), which ``distill`` uses to
map each student layer to the teacher layer it came from.

Example:
    >>> from ghostify import steps
    >>> steps.drop_layers("out/scored", "out/half", keep=6)   # doctest: +SKIP
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe
from .settings import DropSettings, by_scores, evenly_spaced, parse_layers

METHOD = Method(
    name="dropped_layers", tag="dropped-layers", command="drop-layers", noun="dropped layers", settings=DropSettings,
    check=lazy("ghostify.methods.dropped_layers.apply:check"),
    apply=lazy("ghostify.methods.dropped_layers.apply:apply"),
    restore=lazy("ghostify.methods.dropped_layers.restore:restore"),
    validate=lazy("ghostify.methods.dropped_layers.restore:check_layers_record"),
    describe=describe,
    path_settings=("importance",),
    stock=True,
    layer_origin=lambda entry: ([int(i) for i in entry["kept"]], int(entry["of"])),  # the config's layer count (and ModernBERT's layer_types) builds it
    # ghost modules, grouped blocks and references are built per layer (a model with shared layers,
    # which are restored first, is refused by `check`: drop-layers before share-layers)
    before=("ghost", "grouped", "references"),
    help="""Drop whole layers (depth pruning): keep N of the model's layers, or exactly the ones given.

    `--keep N` keeps the N layers whose removal costs least loss, by the layer scores of `ghostify
    importance` (a gate on each layer's whole update, like the head scores); without scores, N evenly
    spaced layers from the first to the last, with a warning (DistilBERT's choice: 6 of 12 keeps
    0,2,4,7,9,11). `--layers 0,2,4` keeps exactly those. The result is a stock checkpoint with a
    smaller layer count; recover with `ghostify distill` (teacher: the input model), which maps
    each kept layer to the teacher layer it came from. Drop layers before attach-ghost,
    group-linear and share-layers; it composes with prune in either order.
    """,
    examples=(
        "ghostify drop-layers out/scored -o out/half --keep 6  (the 6 layers whose removal costs least)",
        "ghostify drop-layers bert-base-uncased -o out/distil-init --keep 6  (no scores: layers 0,2,4,7,9,11)",
        "ghostify drop-layers out/teacher -o out/three --layers 0,2,5",
        "ghostify drop-layers out/scored -o out/half --keep 6, then ghostify distill --teacher out/scored",
    ),
)


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("check_droppable", "choose_layers"),
        "modules": ("keep_layers",),
        "restore": ("check_layers_record",),
    },
)

__all__ = [
    "METHOD",
    "DropSettings",
    "by_scores",
    "check_droppable",
    "check_layers_record",
    "choose_layers",
    "describe",
    "evenly_spaced",
    "keep_layers",
    "parse_layers",
]
