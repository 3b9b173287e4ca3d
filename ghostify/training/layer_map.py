"""Which teacher layer each student layer learns from (1-based; the embeddings map 0 -> 0)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checkpoint import model_record
from ..errors import GhostifyError
from ..methods import layer_origin


@dataclass(frozen=True)
class LayerMap:
    pairs: tuple[tuple[int, int], ...]  # (student layer, teacher layer), 1-based

    def describe(self) -> str:
        return ",".join(f"{s}:{t}" for s, t in self.pairs)


def kept_layers(student: Any, teacher_layers: int) -> list[int] | None:
    """The layers (0-based) of a ``teacher_layers``-deep model that ``student``'s layers are, when a
    method (drop-layers) made the student from a model of the teacher's depth; else None."""
    origin = layer_origin(model_record(student))  # drop-layers says which layers it kept
    if origin is None or origin[1] != teacher_layers:
        return None
    return list(origin[0])


def build_layer_map(student_layers: int, teacher_layers: int, spec: str | None = None, *,
                    kept: Sequence[int] | None = None) -> LayerMap:
    """One-to-one when depths match; student layer j <- teacher layer ``kept[j]`` when the student
    kept those layers of the teacher (``drop-layers``: :func:`kept_layers`); uniform (student layer
    i <- teacher layer i·T/S, TinyBERT) when it is shallower otherwise; or explicit ``"1:2,2:4,3:6"``."""
    if spec:
        pairs = []
        for item in spec.split(","):
            try:
                s, t = (int(x) for x in item.split(":"))
            except ValueError:
                raise GhostifyError(f"--layer-map entry {item!r} is not STUDENT:TEACHER; write e.g. 1:2,2:4") from None
            if not (1 <= s <= student_layers and 1 <= t <= teacher_layers):
                raise GhostifyError(
                    f"--layer-map entry {item!r} is out of range: the student has layers 1..{student_layers}, "
                    f"the teacher 1..{teacher_layers}"
                )
            pairs.append((s, t))
        if len({s for s, _ in pairs}) != len(pairs):
            raise GhostifyError(f"--layer-map {spec!r} maps a student layer twice")
        return LayerMap(tuple(pairs))
    if kept is not None and len(kept) == student_layers and all(0 <= t < teacher_layers for t in kept):
        return LayerMap(tuple((j + 1, t + 1) for j, t in enumerate(kept)))
    if student_layers == teacher_layers:
        return LayerMap(tuple((i, i) for i in range(1, student_layers + 1)))
    if student_layers < teacher_layers:
        return LayerMap(tuple((i, round(i * teacher_layers / student_layers)) for i in range(1, student_layers + 1)))
    raise GhostifyError(
        f"the student has more layers ({student_layers}) than the teacher ({teacher_layers}); give --layer-map"
    )
