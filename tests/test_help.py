"""``--help`` without a terminal (a pipe, a CI log, ``| less``): every flag of every command whole,
no line wider than 80 columns, no ``<bool>`` after a flag, a usage line that names its arguments."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: prints every command's --help into its stdout (a pipe), each after a marker line, and then each
#: command's flags as the Click command objects declare them
_EVERY_HELP = textwrap.dedent("""
    import json, sys

    import typer

    from ghostify.cli import app, main

    commands = typer.main.get_command(app).commands
    flags = {}
    for name in sorted(commands):
        print(f"=== {name}", flush=True)
        main([name, "--help"])
        sys.stdout.flush()
        flags[name] = [flag for p in commands[name].params for flag in [*p.opts, *p.secondary_opts]
                       if p.param_type_name == "option"]
    print("=== ", flush=True)
    main(["--help"])
    sys.stdout.flush()
    print("=== FLAGS " + json.dumps(flags))
""")


def _helps(columns: str | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    if columns is not None:
        env["COLUMNS"] = columns
    result = subprocess.run([sys.executable, "-c", _EVERY_HELP], capture_output=True, text=True, cwd=REPO, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    text, _, flags = result.stdout.partition("=== FLAGS ")
    helps = dict(re.findall(r"^=== (\S*)\n(.*?)(?=^=== )", text + "=== ", flags=re.S | re.M))
    import json

    return helps, json.loads(flags)


@pytest.mark.parametrize("columns", [None, "200", "60"])
def test_help_without_a_terminal_keeps_every_flag_whole(columns):
    """Piped (80 columns), in a wide terminal (still 80: longer lines do not read better) and a narrow one."""
    helps, flags = _helps(columns)
    width = 80 if columns != "60" else 60
    assert len(flags) >= 15 and "distill" in flags and "compress" in flags
    for name, declared in flags.items():
        text = helps[name]
        assert text.startswith(f"Usage: ghostify {name} [OPTIONS]"), text[:200]
        assert "{" not in text.splitlines()[0], text.splitlines()[0]  # `MODEL`, not `{model}`
        for flag in declared:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (name, flag)
        assert not re.search(r"--[\w-]*…", text) and "<bool>" not in text, name  # a flag cut by rich ended in …
        # a path longer than a narrow line overflows rather than being cut: one word alone on its line
        wide = [line for line in text.splitlines() if len(line) > width and len(line.split()) > 1]
        assert not wide, (name, wide)
    assert all(command in helps[""] for command in flags)  # the group lists every command
    assert "--version" in helps[""] and "<bool>" not in helps[""]


def test_help_piped_through_cat_finds_the_long_flags():
    """What the issue tried: `ghostify distill --help | grep ghost-learning-rate` found nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    shown = subprocess.run(f"{sys.executable} -m ghostify distill --help | cat", shell=True, capture_output=True,
                           text=True, cwd=REPO, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = [line for line in shown.stdout.splitlines() if "--ghost-learning-rate" in line]
    assert lines and lines[0].split()[0] == "--ghost-learning-rate", lines
    assert len(shown.stdout.splitlines()) < 250  # the rich panels took about 390 lines
    assert "Usage: ghostify distill [OPTIONS]" in shown.stdout and "--gradient-accumulation-steps <int>" in shown.stdout


def test_ghostify_alone_prints_its_help_not_an_error():
    shown = subprocess.run([sys.executable, "-m", "ghostify"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert shown.returncode == 2 and shown.stderr == "", shown.stderr  # Click's exit code for a missing command
    assert shown.stdout.startswith("Usage: ghostify [OPTIONS] COMMAND [ARGS]...") and "attach-ghost" in shown.stdout
