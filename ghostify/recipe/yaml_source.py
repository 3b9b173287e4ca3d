"""YAML with line numbers: every value's position, so errors can say where to look.

A recipe is untrusted input, read within limits: a recipe of 2 KB whose anchors nest aliases
("billion laughs") would expand to billions of values, and a deeply nested one would exhaust the
stack, so both are refused while the document is composed, before anything is expanded. The same
limits hold for ``--set`` values (:func:`parse_value`). A key that appears twice in one mapping is
refused too: YAML would silently keep the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..errors import GhostifyError
from ..files import check_input_file

Location = tuple[Any, ...]  # e.g. ("stages", 2, "prune", "width")

#: a recipe file's size; shipped recipes are about 2 KB
MAX_BYTES = 1 << 20
#: nesting of mappings and lists (aliases counted as expanded); shipped recipes nest 4 deep
MAX_DEPTH = 100
#: values (mapping keys included) after aliases are expanded; shipped recipes have about 100
MAX_VALUES = 10_000

#: where a mark is, for messages: ``file:line`` for a recipe, ``--set KEY`` for a value
Where = Callable[["yaml.Mark | None"], str]


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing while it composes: nesting beyond :data:`MAX_DEPTH`, aliases
    that expand beyond :data:`MAX_VALUES` values or refer to themselves, and repeated keys."""

    def __init__(self, text: str, where: Where):
        super().__init__(text)
        self.where = where
        self.depth = 0  # of the node being composed
        self.values = 0  # composed so far, aliases expanded
        self.expanded: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) with aliases expanded

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # (an undefined alias is PyYAML's error)
                if id(node) not in self.expanded:
                    self._refuse(event.start_mark, f"alias *{event.anchor} refers to itself (its anchor contains it); "
                                                   "write the value out")
                values, depth = self.expanded[id(node)]
                self._count(values, self.depth + depth, event.start_mark)
            return super().compose_node(parent, index)
        self._count(1, self.depth + 1, self.peek_event().start_mark)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        children = self._children(node)
        self.expanded[id(node)] = (1 + sum(self.expanded[id(c)][0] for c in children),
                                   1 + max((self.expanded[id(c)][1] for c in children), default=0))
        if isinstance(node, yaml.MappingNode):
            self._check_keys(node)
        return node

    @staticmethod
    def _children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    def _count(self, values: int, depth: int, mark: yaml.Mark) -> None:
        self.values += values
        if depth > MAX_DEPTH:
            self._refuse(mark, f"nests deeper than {MAX_DEPTH} levels (aliases expanded); flatten it")
        if self.values > MAX_VALUES:
            self._refuse(mark, f"has more than {MAX_VALUES:,} values once its aliases are expanded (a YAML alias bomb?); "
                               "write the values out or use fewer aliases")

    def _check_keys(self, node: yaml.MappingNode) -> None:
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            first = seen.setdefault((key.tag, key.value), key)
            if first is not key:
                self._refuse(key.start_mark, f"key {key.value!r} appears twice in one mapping (lines "
                                             f"{first.start_mark.line + 1} and {key.start_mark.line + 1}); YAML would "
                                             "silently keep the last one: keep one of them")

    def _refuse(self, mark: yaml.Mark | None, problem: str) -> None:
        raise GhostifyError(f"{self.where(mark)}: {problem}")


def parse(text: str, where: Where) -> tuple[yaml.Node | None, Any]:
    """The document's root node (None when it is empty) and its value, within the limits; a YAML
    syntax error is one line too."""
    loader = None
    try:
        loader = _LimitedLoader(text, where)  # (its reader refuses control characters at once)
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except yaml.YAMLError as exc:
        raise GhostifyError(f"{where(_mark(exc, text))}: invalid YAML: {_problem(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _mark(exc: yaml.YAMLError, text: str) -> yaml.Mark | None:
    mark = getattr(exc, "problem_mark", None)
    if mark is None and isinstance(getattr(exc, "position", None), int):  # the reader: a control character
        line = text.count("\n", 0, exc.position)
        mark = yaml.Mark("<recipe>", exc.position, line, 0, None, None)
    return mark


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if context and getattr(exc, "problem", None):  # "expected a single document", "but found another document"
        problem = f"{context}, {problem}"
    if "'\\t'" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    return problem


def parse_value(text: str, label: str) -> Any:
    """A ``--set`` value as YAML, within the recipe's limits; ``label`` names it in errors."""
    if len(text.encode()) > MAX_BYTES:
        raise GhostifyError(f"{label}: the value is {len(text.encode()):,} bytes, more than the {MAX_BYTES:,} a recipe "
                            "may have; put it in the recipe file")
    return parse(text, lambda mark: label)[1]


class RecipeSource:
    """A parsed YAML document and the line (1-based) of each of its nodes."""

    def __init__(self, text: str, filename: str = "<recipe>"):
        self.filename = filename
        root, data = parse(text, lambda mark: f"{filename}:{mark.line + 1}" if mark is not None else filename)
        self.empty = root is None
        self.data = data if root is not None else {}
        self.lines: dict[Location, int] = {}
        if root is not None:
            self._index(root, ())

    @classmethod
    def read(cls, path: str | Path) -> "RecipeSource":
        """Read a recipe file: a UTF-8 text file of at most :data:`MAX_BYTES` that holds a document."""
        path = check_input_file(path, "recipe", "YAML", example="recipe.yaml")
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise GhostifyError(f"recipe {path} is larger than {MAX_BYTES:,} bytes (1 MiB), the limit of a recipe; "
                                "is it the right file?")
        nul = data.find(b"\0")
        if nul >= 0:
            raise GhostifyError(f"recipe {path} holds a NUL byte at offset {nul}: a binary file (or UTF-16), "
                                "not a UTF-8 YAML recipe; check the path")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise GhostifyError(f"{path}:{line}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8; "
                                "save the recipe as UTF-8") from None
        source = cls(text, str(path))
        if source.empty:
            raise GhostifyError(f"recipe {path} is empty (no YAML document); a recipe is a mapping with model, data "
                                "and stages (see recipes/quickstart.yaml)")
        return source

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
