"""MkDocs hook (``mkdocs.yml``: ``hooks:``) that builds the parts of the site that must not drift.

* **The command reference** (``reference/commands.md``) is generated at every build from ghostify's own
  Click/Typer commands: each command's ``--help`` exactly as ``ghostify COMMAND --help`` prints it at
  80 columns (``ghostify/cli/help.py`` renders it). No copy is checked in, so it cannot go stale.
* **The benchmarks and studies** (``benchmarks/**/*.md`` and their figures) are added to the site under
  their repository paths, so the results files stay where the scripts write them and the "Studies and
  benchmarks" page links them.
* **Links between the two trees**: a page under ``docs/`` links a benchmark file by its path in the
  repository (``../../benchmarks/results/compress.md`` from ``docs/guides/compress.md``), which works when
  the Markdown is read on its own; here such links are rewritten to the page's place in the site.

Only ghostify's shipped commands are documented (plug-ins installed on the building machine are not
loaded), and importing the CLI imports no torch.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "reference/commands.md"
#: repository folders whose Markdown pages and figures join the site under their own paths
INCLUDED = ("benchmarks",)
_SUFFIXES = (".md", ".png")
#: help text is rendered for a terminal this wide: what ``--help`` gets in a pipe or a CI log (no terminal,
#: ``COLUMNS`` unset: 80), and the widest it ever wraps to (click's ``max_content_width``)
WIDTH = 80


def command_helps(width: int = WIDTH) -> dict[str, str]:
    """Every shipped command's name (``""`` for ``ghostify`` itself) and its ``--help`` text, as
    ``ghostify COMMAND --help`` prints it in a terminal ``width`` columns wide (final newline included)."""
    import click
    import typer

    from ghostify.cli import app

    # click's HelpFormatter leaves the terminal's last 2 columns free; given a width, it takes it as is
    text_width = max(width - 2, 50)
    group = typer.main.get_command(app)
    root = click.Context(group, info_name="ghostify", terminal_width=text_width, max_content_width=width)
    helps = {"": group.get_help(root) + "\n"}
    for name in sorted(group.list_commands(root)):
        command = group.get_command(root, name)
        if command is None or command.hidden:
            continue
        context = click.Context(command, info_name=name, parent=root, terminal_width=text_width,
                                max_content_width=width)
        helps[name] = command.get_help(context) + "\n"
    return helps


def summary(help_text: str) -> str:
    """A command's first paragraph of help, on one line."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Usage:")) + 1
    paragraph = []
    for line in lines[start:]:
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            break
    return " ".join(paragraph)


def reference_markdown() -> str:
    helps = command_helps()
    lines = [
        "# Command reference",
        "",
        "Every command's `--help`, generated from the command line itself when this site is built "
        "(`docs/hooks/ghostify_docs.py`), so it is what `ghostify COMMAND --help` prints. The guides explain "
        "what the commands do and why; each command's help ends with worked examples.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name, text in helps.items():
        if name:
            lines.append(f"| [`{name}`](#ghostify-{name}) | {summary(text)} |")
    for name, text in helps.items():
        title = f"ghostify {name}".strip()
        anchor = "ghostify" if not name else f"ghostify-{name}"
        lines += ["", f"## `{title}` {{ #{anchor} }}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def included_files() -> list[Path]:
    """The repository files (outside ``docs/``) that the site carries, as paths relative to the repository."""
    found = []
    for folder in INCLUDED:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix in _SUFFIXES and "__pycache__" not in path.parts:
                found.append(path.relative_to(REPO))
    return found


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, REFERENCE, content=reference_markdown()))
    for path in included_files():
        files.append(File.generated(config, path.as_posix(), abs_src_path=str(REPO / path)))
    return files


_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def on_page_markdown(markdown, page, config, files):
    """Rewrite links to included repository files, written as repository paths relative to the page's
    own file (``docs/guides/x.md`` or ``benchmarks/README.md``), into links to their pages in the site;
    a link to a study's folder goes to its README."""
    source = page.file.src_uri
    if source == REFERENCE:
        return markdown
    included = {p.as_posix() for p in included_files()}
    repository_path = source if source in included else posixpath.join("docs", source)
    here = posixpath.dirname(repository_path)

    def rewrite(match: re.Match) -> str:
        target, _, anchor = match.group(2).partition("#")
        if not target or "://" in target:
            return match.group(0)
        in_repo = posixpath.normpath(posixpath.join(here, target))
        if in_repo.rstrip("/") + "/README.md" in included:  # a study's folder: its README is the page
            in_repo = in_repo.rstrip("/") + "/README.md"
        if in_repo not in included:
            return match.group(0)
        relative = posixpath.relpath(in_repo, posixpath.dirname(source) or ".")
        return f"{match.group(1)}{relative}{'#' + anchor if anchor else ''}{match.group(3)}"

    return _LINK.sub(rewrite, markdown)


__all__ = ["command_helps", "included_files", "reference_markdown", "summary"]

if __name__ == "__main__":  # print the reference, e.g. to read it without building the site
    print(reference_markdown(), end="")
    os._exit(0)
