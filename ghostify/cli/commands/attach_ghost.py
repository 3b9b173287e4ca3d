from __future__ import annotations

from typing import Annotated

import typer

from ...methods.ghost import GhostSettings
from ...methods.ghost.settings import CONV_HELP, INIT_HELP, POSITIONS
from ..app import app
from ..console import err, human
from ..options import Model, Output, Overwrite, Seed


@app.command(
    "attach-ghost",
    epilog="**Examples**\n\n"
    "ghostify attach-ghost out/pruned -o out/ghost  (the paper: k=3, softmax, ReLU, after O and FFN2)\n\n"
    "ghostify attach-ghost bert-base-uncased -o out/bert-ghost  (an unpruned model: 55,296 new parameters)\n\n"
    "ghostify attach-ghost out/pruned -o out/ghost-k9 --kernel-size 9 --no-softmax\n\n"
    "ghostify attach-ghost out/pruned -o out/ghost-f4 --features 4 --per-head\n\n"
    "ghostify attach-ghost out/pruned -o out/ghost-pos --positions qk,v,o,ffn1,ffn2 --conv conv2d\n\n"
    "ghostify attach-ghost out/pruned -o out/ghost-z --init zero-scale  (not in the paper: starts as the pruned model)",
)
def attach_ghost(
    model: Model,
    output: Output,
    kernel_size: Annotated[int, typer.Option("--kernel-size", help="Kernel width in tokens (odd: 1, 3, 5, 9, 17, ...).")] = 3,
    softmax: Annotated[bool, typer.Option("--softmax/--no-softmax", help="Softmax-normalise each kernel (the paper's default).")] = True,
    relu: Annotated[bool, typer.Option("--relu/--no-relu", help="ReLU on each ghost feature (the paper's default).")] = True,
    features: Annotated[int, typer.Option("--features", help="Ghost features F per module, summed.")] = 1,
    per_head: Annotated[bool, typer.Option("--per-head", help="A kernel per head (per FFN fold) on its own contribution, instead of one shared kernel on their sum.")] = False,
    conv: Annotated[str, typer.Option("--conv", help="; ".join(f"{c}: {h}" for c, h in CONV_HELP.items()) + ".")] = "dwconv",
    positions: Annotated[str, typer.Option("--positions", help=f"Comma-separated, among {', '.join(POSITIONS)}: after the attention output projection (o), the FFN down (ffn2) and up (ffn1) projections, the value projection (v: regenerates the N_H - M pruned heads), on the attention scores (qk: a Conv2D).")] = "o,ffn2",
    init: Annotated[str, typer.Option("--init", help="How the kernels start. " + "; ".join(f"{i}: {h}" for i, h in INIT_HELP.items()) + ".")] = "uniform",
    seed: Seed = 0,
    overwrite: Overwrite = False,
) -> None:
    """Add GhostBERT ghost modules to every layer: extra features from cheap convolutions.

    After each chosen projection (default: the attention output projection O and the FFN down
    projection), before dropout, residual and LayerNorm: `y + ReLU(DWConv(y, softmax(W)))`, a
    depthwise convolution over the sequence with one kernel of k tokens per channel shared by all
    heads; d·k parameters per module (55,296 and 14.2M FLOPs for BERT-base at k=3, seq 128).
    Padded tokens are zeroed before convolving, so padding never changes a sequence's outputs.

    **Right after attaching the model's outputs change**: every kernel starts as the uniform
    average over its window (zero logits, softmax -> 1/k), so each module computes
    `y + ReLU(mean of y over the k tokens centred on each token)`, counting zeros beyond the
    sequence ends. With --features > 1 the extra features start from random logits (drawn from --seed)
    so that they can learn different things; --no-softmax starts from the same weights (1/k).
    The exception is `v`: its new output-projection columns start at zero, so it starts as a
    no-op. `--init center` and `--init zero-scale` (not in the paper) start closer to what the
    model computed: kernels peaked on the centre token, or a zero output scale (the outputs are
    unchanged until training moves it). Train the result next (`ghostify distill`, optionally `--train ghost-only`).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    record = steps.attach_ghost(
        model,
        output,
        kernel_size=kernel_size,
        softmax=softmax,
        relu=relu,
        features=features,
        per_head=per_head,
        conv=conv,
        positions=positions,
        init=init,
        seed=seed,
        overwrite=overwrite,
    )
    ghost = record.ghost or {}
    settings = GhostSettings.from_dict(ghost["settings"])
    err.print(f"ghost modules: {settings.describe()}; {human(ghost['params'])} new parameters ({ghost['params']:,})")
    err.print(f"wrote {output}")
