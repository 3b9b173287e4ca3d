"""``--set key=value`` overrides, applied to the YAML document before validation."""

from __future__ import annotations

import copy
from typing import Any

from ..errors import GhostifyError
from .schema import RecipeError
from .yaml_source import parse_value

TOP_LEVEL = ("description", "model", "teacher", "data", "vars", "seed")


def apply_overrides(raw: Any, overrides: list[str] | tuple[str, ...]) -> Any:
    """``model=PATH``, ``data.dataset=PATH``, ``vars.width=3/12``, ``stages.2.epochs=1``, or
    ``NAME.key=value`` for every stage whose ``output`` name or command is NAME
    (``finetune.max_samples=200`` sets it in every finetune stage)."""
    if not isinstance(raw, dict):
        return raw  # not a recipe: validate says so, with the file
    raw = copy.deepcopy(raw)
    problems = []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            problems.append(f"--set {item!r}: write KEY=VALUE, e.g. --set data.task=mrpc")
            continue
        path = key.split(".")
        if "" in path:
            problems.append(f"--set {key}: an empty part in the key; write dotted names, e.g. --set vars.width=0.5")
            continue
        try:
            value = parse_value(text, f"--set {key}") if text else ""
        except GhostifyError as exc:
            problems.append(f"{exc}; quote the value if it is text, e.g. --set '{key}=\"...\"'"
                            if "invalid YAML" in str(exc) else str(exc))
            continue
        problem = None
        if path[0] in TOP_LEVEL:
            problem = _put(raw, path, value, key)
        elif path[0] == "stages" and len(path) >= 3 and path[1].isdigit():
            stages = raw.get("stages") if isinstance(raw.get("stages"), list) else []
            index = int(path[1])
            if index >= len(stages) or not isinstance(stages[index], dict) or len(stages[index]) != 1:
                problems.append(f"--set {key}: the recipe has no stage {index}; stages are numbered from 0")
                continue
            (command, body), = stages[index].items()
            stages[index][command] = body or {}
            problem = _put(stages[index][command], path[2:], value, key, prefix=[*path[:2], command])
        elif len(path) >= 2:
            matched = 0
            for stage in raw.get("stages") or []:
                if not (isinstance(stage, dict) and len(stage) == 1):
                    continue
                (command, body), = stage.items()
                body = body or {}
                if not isinstance(body, dict):
                    continue  # validate reports the stage
                if path[0] in (command, body.get("output")):
                    stage[command] = body
                    problem = problem or _put(body, path[1:], value, key, prefix=[path[0]])
                    matched += 1
            if not matched:
                problems.append(f"--set {key}: no stage is named or runs {path[0]!r}; use a stage's output name or command")
        else:
            problems.append(f"--set {key}: unknown key; top-level keys are {', '.join(TOP_LEVEL)}, or STAGE.KEY")
        if problem:
            problems.append(problem)
    if problems:
        raise RecipeError(problems)
    return raw


def _put(mapping: dict, path: list[str], value: Any, key: str, prefix: list[str] = ()) -> str | None:
    """Set ``value`` at ``path`` inside ``mapping``, creating mappings on the way; the problem when
    a part of the way holds a value that is not a mapping (``--set model.x=1``: the model is a path)."""
    for i, part in enumerate(path[:-1]):
        inner = mapping.setdefault(part, {})
        if not isinstance(inner, dict):
            name = ".".join([*prefix, *path[: i + 1]])
            shown = repr(inner) if len(repr(inner)) <= 40 else repr(inner)[:37] + "..."
            return (f"--set {key}: {name} is {shown}, not a mapping, so it has no key {path[i + 1]!r}; "
                    f"set {name} itself, e.g. --set {name}=VALUE")
        mapping = inner
    mapping[path[-1]] = value
    return None
