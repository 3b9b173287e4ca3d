"""``--help`` as plain text that reads the same in a terminal, a pipe, ``less`` and a CI log.

Typer's rich panels lay the options out as a table: at 80 columns (every pipe, a CI log) they cut
flags (``--ghost-learni…``) and squeeze the descriptions to a few words a line. Here every option is
written whole on its line with its description wrapped beside or below it (Click's layout), flags
take no ``<bool>``, the usage line names arguments as ``MODEL``, and words are never broken at a
hyphen (``--doc-stride`` stays one word). Text is wrapped to the terminal, at most 80 columns.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

from typer.core import TyperCommand, TyperGroup

#: the widest column of option names before the description moves to the next line (Click's)
_NAMES_WIDTH = 30
_SPACING = 2


def _wrap(text: str, width: int, indent: str = "", later: str | None = None) -> list[str]:
    """``text``'s paragraphs (blank-line separated) wrapped to ``width``, a blank line between them;
    never breaking a word (a long path or flag overflows rather than being cut)."""
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        if lines:
            lines.append("")
        lines += textwrap.wrap(" ".join(paragraph.split()), width=max(width, 20), initial_indent=indent,
                               subsequent_indent=indent if later is None else later,
                               break_on_hyphens=False, break_long_words=False) or [indent]
    return lines


def _write_lines(formatter: Any, lines: list[str]) -> None:
    formatter.write("".join(f"{' ' * formatter.current_indent}{line}".rstrip() + "\n" for line in lines))


def _write_text(formatter: Any, text: str) -> None:
    _write_lines(formatter, _wrap(text, formatter.width - formatter.current_indent))


def _write_definitions(formatter: Any, rows: list[tuple[str, str]]) -> None:
    """Names and descriptions: a name that fits is followed by its description; a longer one takes its
    own line, whole, with the description below it."""
    width = formatter.width - formatter.current_indent
    column = min(max((len(name) for name, _ in rows), default=0), _NAMES_WIDTH) + _SPACING
    for name, description in rows:
        lines = _wrap(description, width - column) if description else []
        if len(name) <= column - _SPACING and lines:
            first, rest = f"{name:<{column}}{lines[0]}", lines[1:]
        else:
            first, rest = name, lines
        _write_lines(formatter, [first] + [" " * column + line if line else "" for line in rest])


def _metavar(param: Any, ctx: Any) -> str:
    """What an option's value looks like: Typer's type name without " range" (the range is stated in
    the description's brackets); nothing for a flag."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    shown = param.display_type_rich(ctx) if hasattr(param, "display_type_rich") else param.make_metavar(ctx)
    return f" {shown.replace(' range>', '>')}" if shown else ""


def _argument_name(param: Any) -> str:
    return (param.metavar or param.name or "").upper() + ("..." if param.nargs != 1 else "")


def _write_help_text(command: Any, formatter: Any) -> None:
    if command.help:
        formatter.write_paragraph()
        with formatter.indentation():
            _write_text(formatter, inspect.cleandoc(command.help).partition("\f")[0])


def _option_row(param: Any, ctx: Any) -> tuple[str, str] | None:
    record = param.get_help_record(ctx)
    if record is None:
        return None
    names = ", ".join(sorted(param.opts, key=len))  # -o, --output
    if param.secondary_opts:
        names += " / " + ", ".join(sorted(param.secondary_opts, key=len))
    names += _metavar(param, ctx)
    return names, record[1]


class HelpCommand(TyperCommand):
    """A command whose ``--help`` is plain text that keeps every flag whole (see the module)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        _write_help_text(self, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument" and not getattr(param, "hidden", False):
                arguments.append((_argument_name(param), param.help or ""))
            elif param.param_type_name == "option":
                row = _option_row(param, ctx)
                if row is not None:
                    options.append(row)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    _write_definitions(formatter, rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        """The examples, one a paragraph; a command longer than the line continues indented."""
        if not self.epilog:
            return
        heading, _, rest = inspect.cleandoc(self.epilog).partition("\n\n")
        if heading.rstrip(":") != "Examples" or not rest:
            formatter.write_paragraph()
            with formatter.indentation():
                _write_text(formatter, self.epilog)
            return
        with formatter.section("Examples"):
            width = formatter.width - formatter.current_indent
            for example in re.split(r"\n\s*\n", rest.strip()):
                _write_lines(formatter, _wrap(example, width, later="    "))


class HelpGroup(TyperGroup):
    """The ``ghostify`` group: the same plain help, each command listed with its first paragraph whole."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [self.options_metavar, self.subcommand_metavar] if self.options_metavar else [self.subcommand_metavar]

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        _write_help_text(self, formatter)

    def late_rows(self) -> list[tuple[str, str]]:
        """Commands listed that are made only when named (a subclass's: plug-ins), with their one-line help."""
        return []

    def format_options(self, ctx: Any, formatter: Any) -> None:
        rows = [row for param in self.get_params(ctx) if param.param_type_name == "option"
                for row in [_option_row(param, ctx)] if row is not None]
        if rows:
            with formatter.section("Options"):
                _write_definitions(formatter, rows)
        rows = [(name, inspect.cleandoc(command.help or "").partition("\n\n")[0])
                for name, command in self.commands.items() if not command.hidden]
        rows = sorted(rows + [row for row in self.late_rows() if row[0] not in self.commands])
        if rows:
            with formatter.section("Commands"):
                _write_definitions(formatter, rows)
