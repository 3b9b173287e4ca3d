"""``ghostify info``: size, FLOPs and structure of a checkpoint."""

from __future__ import annotations

import os
from typing import Any

from torch.utils.flop_counter import FlopCounterMode

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record
from ..errors import GhostifyError
from ..flops import measure
from ..methods import measure_all, methods
from ..runtimes import graph_of
from ..settings import InfoDefaults
from .common import max_tokens


def info(model: str | os.PathLike, *, seq_len: int = InfoDefaults.seq_len) -> dict[str, Any]:
    """Parameters, FLOPs (batch 1, ``seq_len`` tokens, embedding lookup excluded), heads and FFN
    size per distinct layer (shared layers and parameters counted once; ``layer_applications``
    says how often each layer runs), ghost settings, factorised embeddings, sharing and history,
    as one JSON-ready dict. ``ghost_params`` and
    ``ghost_flops`` are the ghost modules' share, already included in ``params`` and ``flops``.

    Example:
        >>> info("out/pruned")["flops"]  # doctest: +SKIP
    """
    _refuse_graph(model)
    _check_seq_len(model, seq_len)
    net = load_model(model)
    record = model_record(net)
    # an outer counter sees the same single forward pass, broken down by module
    with FlopCounterMode(display=False) as counter:
        size = measure(net, seq_len=seq_len)
    return {
        "model": str(model),
        "model_type": net.config.model_type,
        "class": type(net).__name__,
        **size.as_dict(),
        # what each method measures on the loaded model: its parameters' and FLOPs' share, a store beside them
        **measure_all(net, counter.get_flop_counts()),
        "seq_len": seq_len,
        "layers": len(record.heads),
        "heads_per_layer": record.heads_per_layer,
        "ffn_per_layer": list(record.ffn),
        "kept_heads": record.heads,
        "methods": record.methods,
        # each tracked method's record entry also under its own name (None when not applied)
        **{m.name: record.entry(m.name) for m in methods() if m.tracked},
        "layer_applications": get_adapter(net.config).layer_applications(net),
        "history": record.history,
    }


def report_size(model: str | os.PathLike, seq_len: int = InfoDefaults.seq_len) -> dict[str, Any]:
    """``info`` at ``seq_len`` tokens, or at all the model can read when that is fewer (a recipe's
    report and dry run must not fail on a model with a short position table)."""
    return info(model, seq_len=min(seq_len, max_tokens(load_config(model))))


def _refuse_graph(model: str | os.PathLike) -> None:
    """A graph export holds a graph, not the weights info counts: say what it is and what reads it."""
    found = graph_of(model)
    if found is None:
        return
    (target, graph), directory = found, found[1].parent
    graphs = (", ".join(sorted(p.name for p in directory.glob(f"*{target.runtime.suffix}")))
              if graph.name == target.runtime.graph else graph.name)
    raise GhostifyError(f"{model} is an {target.runtime.format_title} export ({graphs}), which info cannot read: "
                        f"`ghostify eval {model} --task ...` "
                        f"and `ghostify bench {model}` run on it; for its size and structure, run `ghostify info` on "
                        "the checkpoint it was exported from")


def _check_seq_len(model: str | os.PathLike, seq_len: int) -> None:
    limit = max_tokens(load_config(model))
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 1 <= seq_len <= limit:
        raise GhostifyError(f"--seq-len {seq_len!r} must be between 1 and the {limit} tokens {model} can read")
