"""``allocation.json``: the allocation ``compress`` chose and the speed-ups it measured, which a re-run with the same
settings keeps (so that the stages after prune, the training, are not redone after a re-allocation).

The file is validated as the recipe schema validates a recipe (pydantic): each field states what it must be, and
a damaged file (not JSON, or not the shape compress writes: a hand edit, a disk fault) is named by its first wrong
field, ignored with one warning and the allocation made again, as when there is none. The file is compress's own
record of a choice it can remake (minutes of timing, the finished stages still skipped), so refusing it would
only make the user delete it by hand.
"""

from __future__ import annotations

import json
import math
import typing
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..files import write_text_atomically
from ..steps.fidelity import candidate_allocations

#: the file, in compress's output directory
ALLOCATION = "allocation.json"
#: a problem of the file as a whole (its message says all)
_WHOLE = "allocation"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _fraction(value: Any) -> Fraction | None:
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        return None


def _must(test: typing.Callable[[Any], bool], *names: str) -> Any:
    """A validator of the fields ``names``, run on the value as the file holds it: ``test`` says whether it is
    what the field must be (what it must be is the field's ``description``, which the warning quotes)."""
    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError("see the field's description")
        return value

    return field_validator(*names, mode="before")(check)


class Attempt(BaseModel):
    """One allocation compress timed: what it was allocated for, predicted and measured (and whatever else the
    timing said: the clock, the quartiles, the milliseconds)."""

    model_config = ConfigDict(extra="allow")

    allocated_for: int | float = Field(description="not a positive number")
    predicted: int | float = Field(description="not a positive number")
    measured: int | float = Field(description="not a positive number")
    rounds: int | float = Field(description="not a positive number")
    kept: bool = Field(False, description="not true or false")
    structure: list[Any] | None = Field(None, description="not [layers kept, hidden width]")

    _numbers = _must(_number, "allocated_for", "predicted", "measured", "rounds")
    _kept = _must(lambda value: isinstance(value, bool), "kept")
    _structure = _must(lambda value: value is None or (isinstance(value, list) and len(value) == 2), "structure")


class PruneStage(BaseModel):
    """The prune stage's settings the allocation chose: a width (uniform), or a speed-up by a latency model."""

    model_config = ConfigDict(extra="allow")

    width: Any = Field(None, description="not a width")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not ({"width"} <= set(value) or {"speedup", "latency"} <= set(value)):
            raise ValueError("see the field's description")
        return value

    _width = _must(lambda value: value is None or (_fraction(value) is not None and 0 < _fraction(value) <= 1),
                   "width")


class AllocationRecord(BaseModel):
    """What ``allocation.json`` holds, in the order compress writes it."""

    model_config = ConfigDict(extra="allow")

    #: the run's settings: a re-run with other settings allocates again
    settings: dict[str, Any]
    #: the speed-up the kept allocation was made for (the target, or a corrected one)
    allocated_for: int | float = Field(description="not a speed-up above 1")
    keep_layers: list[int] | None = Field(None, description="neither null nor a list of layer indices")
    hidden_width: Any = Field(None, description="neither null nor a width below 1")
    attempts: list[Attempt] = Field(description="not a list of measured allocations")
    choice: dict[str, Any] | None = Field(None, description="neither null nor the choice of allocation compress "
                                                            "writes")
    prune: PruneStage | None = Field(None, description="neither null nor the prune settings compress writes")

    @model_validator(mode="before")
    @classmethod
    def _a_run(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not isinstance(value.get("settings"), dict):
            raise PydanticCustomError(_WHOLE, "not a JSON object with the settings of a run")
        return value

    _allocated_for = _must(lambda value: _number(value) and value > 1, "allocated_for")
    _keep_layers = _must(lambda value: value is None or (isinstance(value, list) and bool(value) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)), "keep_layers")
    _hidden_width = _must(lambda value: value is None or (_fraction(value) is not None and 0 < _fraction(value) < 1),
                          "hidden_width")
    _attempts = _must(lambda value: isinstance(value, list) and bool(value), "attempts")
    _choice = _must(lambda value: value is None or (isinstance(value, dict) and value.get("chosen") in candidate_allocations()
                                                    and isinstance(value.get("gaps"), dict)), "choice")

    @model_validator(mode="after")
    def _one_kept(self) -> AllocationRecord:
        if sum(a.kept for a in self.attempts) > 1:
            raise PydanticCustomError(_WHOLE, "more than one of the attempts is marked kept")
        return self

    def kept(self) -> Attempt:
        """The attempt that was trained and shipped (the last one in a file that marks none)."""
        return next((a for a in self.attempts if a.kept), self.attempts[-1])


def problem(error: ValidationError) -> str:
    """The first thing wrong with a file, as ``path = value, what it must be`` (``attempts[0].measured = nan, not a
    positive number``), or the file's problem as a whole."""
    first = error.errors()[0]
    if first["type"] == _WHOLE:
        return first["msg"]
    where = first["loc"]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where).lstrip(".")
    value = None if first["type"] == "missing" else first["input"]
    return f"{path} = {value!r}, {_requirement(where)}"


def _requirement(where: tuple[Any, ...]) -> str:
    """What the field at ``where`` must be: its description (the innermost one that has one)."""
    model: Any = AllocationRecord
    said = ""
    for part in where:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            break
        said = field.description or said
        model = next((t for t in (field.annotation, *_inner(field.annotation))
                      if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return said


def _inner(annotation: Any) -> list[Any]:
    """The types inside ``annotation`` (``list[Attempt]``, ``PruneStage | None``), at any depth."""
    out = []
    for arg in typing.get_args(annotation):
        out += [arg, *_inner(arg)]
    return out


def read(out: Path, settings: dict[str, Any], *, name: str = ALLOCATION) -> AllocationRecord | None:
    """The allocation an earlier run into ``out`` with the same ``settings`` chose and measured (``name``: the file;
    a run of several compression stages writes one per stage); None where there is none, it was made with other
    settings, or the file is damaged (then with one warning)."""
    path = out / name
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        wrong: str | None = f"not readable JSON ({exc})"
    else:
        try:
            record = AllocationRecord.model_validate(saved)
            wrong = None
        except ValidationError as exc:
            wrong = problem(exc)
    if wrong is not None:
        warnings.warn(f"ignoring {path}: {wrong}; the allocation is made again", stacklevel=3)
        return None
    return record if record.settings == json.loads(json.dumps(settings, default=str)) else None


def write(out: Path, values: dict[str, Any], *, name: str = ALLOCATION) -> None:
    """Write ``values`` (the fields of :class:`AllocationRecord`, in its order) as ``allocation.json`` (or ``name``)."""
    write_text_atomically(out / name, json.dumps(values, indent=2, default=str))


__all__ = ["ALLOCATION", "AllocationRecord", "Attempt", "PruneStage", "problem", "read", "write"]
