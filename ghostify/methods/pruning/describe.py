"""Structured pruning of heads and FFN neurons (``prune``): see :mod:`ghostify.methods.pruning`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("heads per layer", str(info["heads_per_layer"])), ("FFN per layer", str(info["ffn_per_layer"]))]
    target = _latency_target(info.get("history") or [])
    if target:
        rows.append(("pruned for latency", target))
    how = _how_chosen(_last_prune(info.get("history") or []))
    return [*rows, ("pruned by", how)] if how else rows


def _last_prune(history: list[Any]) -> dict[str, Any]:
    steps = [s.get("arguments") or {} for s in history if isinstance(s, dict) and s.get("command") == "prune"]
    return steps[-1] if steps and isinstance(steps[-1], dict) else {}


def _how_chosen(prune: Mapping[str, Any]) -> str | None:
    """"fisher scores, rearranged within layers, tuned on 2048 examples (11 of 12 blocks)": how the last ``prune``
    chose and tuned what it kept (None before any, or for a history edited by hand)."""
    criterion = prune.get("criterion")
    if not isinstance(criterion, str):
        return None
    parts = [f"{criterion} scores"]
    if isinstance(prune.get("rearranged"), dict):
        parts.append("rearranged within layers by the Fisher blocks")
    tuned = prune.get("tuned")
    if isinstance(tuned, dict) and isinstance(tuned.get("layers"), list):
        applied = sum(1 for r in tuned["layers"] if isinstance(r, dict) and r.get("applied"))
        parts.append(f"scales tuned on {tuned.get('examples')} examples ({applied} of {len(tuned['layers'])} attention "
                     "and FFN blocks)")
    return ", ".join(parts)


def _latency_target(history: list[Any]) -> str | None:
    """What the last ``prune`` of the history aimed at, when it was a speed-up (``--speedup``):
    "2x on onnx-int8, batch 1 x 128 tokens, 1 thread(s): predicted 3.1 ms (target 3.2, dense 6.4 ms)"."""
    last = _last_prune(history)
    numbers = [last.get(key) for key in ("speedup", "predicted_ms", "target_ms", "dense_ms")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        return None  # a width's pruning (or a history edited by hand)
    speedup, predicted, target, dense = numbers
    return (f"{speedup:g}x on {last.get('deployment')}: predicted {predicted:.4g} ms "
            f"(target {target:.4g}, dense {dense:.4g} ms)")
