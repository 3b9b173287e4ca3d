"""YAML with line numbers: every value's position, so errors can say where to look."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import GhostifyError

Location = tuple[Any, ...]  # e.g. ("stages", 2, "prune", "width")


class RecipeSource:
    """A parsed YAML document and the line (1-based) of each of its nodes."""

    def __init__(self, text: str, filename: str = "<recipe>"):
        self.filename = filename
        try:
            root = yaml.compose(text)
            self.data = yaml.safe_load(text) if root is not None else {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{filename}:{mark.line + 1}" if mark is not None else filename
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise GhostifyError(f"{where}: invalid YAML: {problem}") from None
        self.lines: dict[Location, int] = {}
        if root is not None:
            self._index(root, ())

    @classmethod
    def read(cls, path: str | Path) -> "RecipeSource":
        path = Path(path)
        if not path.is_file():
            raise GhostifyError(f"recipe {path} does not exist; check the path")
        return cls(path.read_text(), str(path))

    def _index(self, node: yaml.Node, location: Location) -> None:
        self.lines[location] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*location, key.value)
                self.lines[child] = key.start_mark.line + 1
                self._index_value(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._index(item, (*location, i))

    def _index_value(self, node: yaml.Node, location: Location) -> None:
        line = self.lines[location]
        self._index(node, location)
        self.lines[location] = line  # a key's own line, not its value's

    def line(self, location: Location) -> int:
        """The line of ``location``, or of its nearest ancestor present in the file."""
        location = tuple(location)
        while location and location not in self.lines:
            location = location[:-1]
        return self.lines.get(location, 1)

    def where(self, location: Location) -> str:
        return f"{self.filename}:{self.line(location)}"
