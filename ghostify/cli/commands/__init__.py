"""Importing this package registers every command on the Typer app."""

from . import (  # noqa: F401  # noqa: F401
    attach_ghost,
    augment,
    bench,
    distill,
    evaluate,
    export,
    factorize_embeddings,
    finetune,
    group_linear,  # noqa: F401
    importance,
    info,
    prune,
    run,
    share_layers,
)
