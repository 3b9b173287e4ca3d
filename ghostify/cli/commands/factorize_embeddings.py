from __future__ import annotations

from typing import Annotated

import typer

from ..app import app
from ..console import err, human
from ..options import Model, Output, Overwrite


@app.command(
    "factorize-embeddings",
    epilog="**Examples**\n\n"
    "ghostify factorize-embeddings bert-base-uncased -o out/bert-e128 --rank 128  (23.4M -> 4.0M embedding parameters)\n\n"
    "ghostify factorize-embeddings out/teacher -o out/factorized --rank 128, then ghostify distill --teacher out/teacher",
)
def factorize_embeddings(
    model: Model,
    output: Output,
    rank: Annotated[int, typer.Option("--rank", help="Inner size E of the V x E and E x H factors (ALBERT: 128); at most the embedding width.", show_default=False)],
    overwrite: Overwrite = False,
) -> None:
    """Factorise the word embeddings into V x E and E x H matrices (ALBERT).

    The factors come from the truncated SVD of the V x H embedding matrix, its best rank-E
    approximation, so the model keeps working before any training; the relative reconstruction
    error (Frobenius) says how much changed. A tied masked-LM decoder computes its logits from the
    same factors. Recover the rest with `ghostify distill` (teacher: the input model).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    record = steps.factorize_embeddings(model, output, rank=rank, overwrite=overwrite)
    e = record.embeddings or {}
    err.print(
        f"word embeddings {e['vocab']} x {e['width']} -> {e['vocab']} x {e['rank']} + {e['rank']} x {e['width']}: "
        f"{human(e['params_before'])} -> {human(e['params_after'])} parameters "
        f"({e['params_saved']:,} saved); relative reconstruction error {e['error']:.4f}"
    )
    err.print(f"wrote {output}")
