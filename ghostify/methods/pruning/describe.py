"""Structured pruning of heads and FFN neurons (``prune``): see :mod:`ghostify.methods.pruning`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("heads per layer", str(info["heads_per_layer"])), ("FFN per layer", str(info["ffn_per_layer"]))]
    target = _latency_target(info.get("history") or [])
    return [*rows, ("pruned for latency", target)] if target else rows


def _latency_target(history: list[Any]) -> str | None:
    """What the last ``prune`` of the history aimed at, when it was a speed-up (``--speedup``):
    "2x on onnx-int8, batch 1 x 128 tokens, 1 thread(s): predicted 3.1 ms (target 3.2, dense 6.4 ms)"."""
    steps = [s.get("arguments") or {} for s in history if isinstance(s, dict) and s.get("command") == "prune"]
    last = steps[-1] if steps and isinstance(steps[-1], dict) else {}
    numbers = [last.get(key) for key in ("speedup", "predicted_ms", "target_ms", "dense_ms")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        return None  # a width's pruning (or a history edited by hand)
    speedup, predicted, target, dense = numbers
    return (f"{speedup:g}x on {last.get('deployment')}: predicted {predicted:.4g} ms "
            f"(target {target:.4g}, dense {dense:.4g} ms)")
