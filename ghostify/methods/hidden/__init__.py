"""Hidden-size pruning (width of the residual stream): keep one set of the ``hidden_size`` channels across
the whole model, as Minitron prunes embedding channels (Muralidharan et al. 2024) and CoFi's hidden masks
do (Xia et al. 2022): the embedding tables and their norm, every layer's projections (the inputs of Q, K,
V and the FFN's up and gate projections, the outputs of the attention output and FFN down projections
with their biases), every norm, the pooler and the task head's input. Each head keeps its width
(``hidden_size / heads`` no longer says it: the record and the config's head-size key do).

Which channels stay is decided by ``ghostify importance``'s channel scores, from the same pass as the
head and neuron scores: a gate per channel shared by every layer (its Fisher information E[(dL/dg)²]
and first-order E|dL/dg|, as for heads) and Minitron's activation magnitude (mean |x| of each channel at
every norm's output). The norms' statistics change when channels go (a norm averages over the kept
channels only); ``ghostify distill`` recovers from it against the unpruned model, comparing each student
hidden state with the teacher's kept channels (the record says which: no learned projection).

The record keeps ``methods.hidden``: ``kept`` (indices of the original channels), ``of`` (the original
hidden size), ``head_size`` and ``keep_output_dim``.

Example:
    >>> from ghostify import steps
    >>> steps.prune_hidden("out/scored", "out/narrow", hidden_width="0.5")   # doctest: +SKIP
"""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe
from .settings import HiddenSettings, kept_channels

METHOD = Method(
    name="hidden", tag="hidden-pruned", command="prune-hidden", noun="a pruned hidden size", settings=HiddenSettings,
    check=lazy("ghostify.methods.hidden.apply:check"),
    apply=lazy("ghostify.methods.hidden.apply:apply"),
    restore=lazy("ghostify.methods.hidden.restore:restore"),
    validate=lazy("ghostify.methods.hidden.restore:check_hidden_record"),
    describe=describe,
    path_settings=("importance",),
    # which original channels the student keeps: distill compares its hidden states with the teacher's kept channels
    channel_origin=lambda entry: ([int(c) for c in entry["kept"]], int(entry["of"])),
    # ghost modules, grouped blocks, references and factorised embeddings are built at the hidden width they
    # were attached to; pruning (heads, neurons), dropped and shared layers compose in either order
    before=("grouped", "ghost", "embeddings", "references"),
    help="""Prune the hidden size: keep the same residual channels in every layer, the embeddings, norms and head.

    Keeps round(hidden_size * w) channels (a multiple of the head count; widths are relative to the
    original hidden size), the most important by the channel scores of `ghostify importance` (weight
    magnitude, with a warning, without scores). Each head keeps its width. The norms then average over
    the kept channels: recover with `ghostify distill` (teacher: the input model), which compares each
    hidden state with the teacher's kept channels. A bare encoder's output (and its sentence embedding)
    becomes narrower: --keep-output-dim pads it back with zeros so that an existing index stays
    comparable. Prune the hidden size before attach-ghost, group-linear, factorize-embeddings and
    distill --references; it composes with prune and drop-layers in either order.
    """,
    examples=(
        "ghostify prune-hidden out/scored -o out/narrow --hidden-width 0.75",
        "ghostify prune-hidden out/scored -o out/narrow --hidden-width 192/384 --criterion fisher",
        "ghostify prune-hidden out/embedder -o out/narrow --hidden-width 0.5 --keep-output-dim  (index-compatible)",
        "ghostify prune-hidden out/scored -o out/narrow --hidden-width 0.5, then ghostify distill --teacher out/scored",
    ),
)

# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("by_scores", "cut_hidden", "magnitude_scores", "prune_hidden", "refusal", "scorable"),
        "gates": ("ChannelGates", "channel_gates"),
        "modules": ("PadChannels", "pad_output", "parts_of", "restore_attention", "slice_channels"),
        "restore": ("check_hidden_record",),
    },
)

__all__ = [
    "ChannelGates",
    "HiddenSettings",
    "METHOD",
    "PadChannels",
    "by_scores",
    "cut_hidden",
    "channel_gates",
    "check_hidden_record",
    "describe",
    "kept_channels",
    "magnitude_scores",
    "pad_output",
    "parts_of",
    "prune_hidden",
    "refusal",
    "restore_attention",
    "scorable",
    "slice_channels",
]
