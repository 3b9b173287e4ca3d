"""Which teacher layer each student layer learns from (1-based; the embeddings map 0 -> 0)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GhostifyError


@dataclass(frozen=True)
class LayerMap:
    pairs: tuple[tuple[int, int], ...]  # (student layer, teacher layer), 1-based

    def describe(self) -> str:
        return ",".join(f"{s}:{t}" for s, t in self.pairs)


def build_layer_map(student_layers: int, teacher_layers: int, spec: str | None = None) -> LayerMap:
    """One-to-one when depths match; uniform (student layer i <- teacher layer i·T/S, TinyBERT)
    when the student is shallower; or explicit ``"1:2,2:4,3:6"``."""
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
    if student_layers == teacher_layers:
        return LayerMap(tuple((i, i) for i in range(1, student_layers + 1)))
    if student_layers < teacher_layers:
        return LayerMap(tuple((i, round(i * teacher_layers / student_layers)) for i in range(1, student_layers + 1)))
    raise GhostifyError(
        f"the student has more layers ({student_layers}) than the teacher ({teacher_layers}); give --layer-map"
    )
