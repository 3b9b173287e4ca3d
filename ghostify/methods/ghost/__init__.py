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
from ..base import Method, lazy
from .describe import describe
from .settings import CONVS, DEFAULT_POSITIONS, POSITIONS, GhostSettings

METHOD = Method(
    name="ghost", tag="ghost", command="attach-ghost", noun="ghost modules", settings=GhostSettings,
    check=lazy("ghostify.methods.ghost.apply:check"),
    apply=lazy("ghostify.methods.ghost.apply:apply"),
    restore=lazy("ghostify.methods.ghost.restore:restore"),
    validate=lazy("ghostify.methods.ghost.restore:check_ghost_record"),
    describe=describe,
    measure=lazy("ghostify.methods.ghost.apply:measure"),
    seeded=True,
    repeatable=False,
    help="""Add GhostBERT ghost modules to every layer: extra features from cheap convolutions.

    After each chosen projection (default: the attention output projection O and the FFN down
    projection), before dropout, residual and LayerNorm: `y + ReLU(DWConv(y, softmax(W)))`, a
    depthwise convolution over the sequence with one kernel of k tokens per channel shared by all
    heads; d·k parameters per module (55,296 and 14.2M FLOPs for BERT-base at k=3, seq 128).
    Padded tokens are zeroed before convolving, so padding never changes a sequence's outputs.

    Right after attaching the model's outputs change: every kernel starts as the uniform
    average over its window (zero logits, softmax -> 1/k), so each module computes
    `y + ReLU(mean of y over the k tokens centred on each token)`, counting zeros beyond the
    sequence ends. With --features > 1 the extra features start from random logits (drawn from --seed)
    so that they can learn different things; --no-softmax starts from the same weights (1/k).
    The exception is `v`: its new output-projection columns start at zero, so it starts as a
    no-op. `--init center` and `--init zero-scale` (not in the paper) start closer to what the
    model computed: kernels peaked on the centre token, or a zero output scale (the outputs are
    unchanged until training moves it). Train the result next (`ghostify distill`, optionally `--train ghost-only`).
    """,
    examples=(
        "ghostify attach-ghost out/pruned -o out/ghost  (the paper: k=3, softmax, ReLU, after O and FFN2)",
        "ghostify attach-ghost bert-base-uncased -o out/bert-ghost  (an unpruned model: 55,296 new parameters)",
        "ghostify attach-ghost out/pruned -o out/ghost-k9 --kernel-size 9 --no-softmax",
        "ghostify attach-ghost out/pruned -o out/ghost-f4 --features 4 --per-head",
        "ghostify attach-ghost out/pruned -o out/ghost-pos --positions qk,v,o,ffn1,ffn2 --conv conv2d",
        "ghostify attach-ghost out/pruned -o out/ghost-z --init zero-scale  (not in the paper: starts as the pruned model)",
    ),
)


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("attach_ghosts", "freeze_except_ghosts", "ghost_flops", "ghost_kernel_parameters", "ghost_params",
                  "ghost_record"),
        "install": ("ghost_parameter_names", "has_ghosts"),
        "context": ("GhostContext",),
        "modules": ("GhostColumns", "GhostConv", "GhostLinear", "GhostMapConv", "GhostValue"),
        "restore": ("check_ghost_record", "restore_ghosts"),
    },
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
