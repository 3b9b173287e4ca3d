"""``--set key=value`` overrides, applied to the YAML document before validation."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from .schema import RecipeError

TOP_LEVEL = ("description", "model", "teacher", "data", "vars", "seed")


def apply_overrides(raw: Any, overrides: list[str] | tuple[str, ...]) -> Any:
    """``model=PATH``, ``data.dataset=PATH``, ``vars.width=3/12``, ``stages.2.epochs=1``, or
    ``NAME.key=value`` for every stage whose ``output`` name or command is NAME
    (``finetune.max_samples=200`` sets it in every finetune stage)."""
    raw = copy.deepcopy(raw) if isinstance(raw, dict) else {}
    problems = []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            problems.append(f"--set {item!r}: write KEY=VALUE, e.g. --set data.task=mrpc")
            continue
        value = yaml.safe_load(text) if text else ""
        path = key.split(".")
        if path[0] in TOP_LEVEL:
            _put(raw, path, value)
        elif path[0] == "stages" and len(path) >= 3 and path[1].isdigit():
            stages = raw.get("stages") or []
            index = int(path[1])
            if index >= len(stages) or not isinstance(stages[index], dict) or len(stages[index]) != 1:
                problems.append(f"--set {key}: the recipe has no stage {index}; stages are numbered from 0")
                continue
            (command, body), = stages[index].items()
            stages[index][command] = body or {}
            _put(stages[index][command], path[2:], value)
        elif len(path) >= 2:
            matched = 0
            for stage in raw.get("stages") or []:
                if not (isinstance(stage, dict) and len(stage) == 1):
                    continue
                (command, body), = stage.items()
                body = body or {}
                if path[0] in (command, body.get("output")):
                    stage[command] = body
                    _put(body, path[1:], value)
                    matched += 1
            if not matched:
                problems.append(f"--set {key}: no stage is named or runs {path[0]!r}; use a stage's output name or command")
        else:
            problems.append(f"--set {key}: unknown key; top-level keys are {', '.join(TOP_LEVEL)}, or STAGE.KEY")
    if problems:
        raise RecipeError(problems)
    return raw


def _put(mapping: dict, path: list[str], value: Any) -> None:
    for part in path[:-1]:
        mapping = mapping.setdefault(part, {})
    mapping[path[-1]] = value
