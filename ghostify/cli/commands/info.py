from __future__ import annotations

from typing import Annotated

import typer

from ...settings import InfoDefaults
from ..app import app
from ..console import print_json
from ..options import Json, Model
from ..summary import print_info


@app.command(
    epilog="Examples:\n\n"
    "ghostify info out/pruned\n\n"
    "ghostify info out/pruned --json | jq .flops"
)
def info(
    model: Model,
    json_output: Json = False,
    seq_len: Annotated[int, typer.Option("--seq-len", min=1, help="Sequence length for the FLOP count (batch 1).")] = InfoDefaults.seq_len,
) -> None:
    """Parameters, FLOPs, heads and FFN size per layer, ghost settings and history.

    FLOPs are counted on one forward pass at batch 1 (multiply-add = 2 FLOPs), excluding the
    embedding lookup, as in the GhostBERT paper. The history shows each step's settings that differ
    from their defaults; --json has every setting and what each step measured.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    data = steps.info(model, seq_len=seq_len)
    if json_output:
        print_json(data)
    else:
        print_info(data)
