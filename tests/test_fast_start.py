"""`ghostify --help`, every `ghostify COMMAND --help` and `--version` start without torch,
transformers or datasets (seconds of imports); shell completion is there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import ghostify

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets")

_HELP_EVERYWHERE = textwrap.dedent("""
    import contextlib, io, json, sys

    import typer

    from ghostify.cli import app, main

    names = sorted(typer.main.get_command(app).commands)
    codes = {}
    for args in [["--help"], ["--version"], *([name, "--help"] for name in names)]:
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            codes[" ".join(args)] = (main(args), "Usage" in text.getvalue() or "ghostify" in text.getvalue())
    heavy = [m for m in %r if m in sys.modules]
    print(json.dumps({"names": names, "codes": codes, "heavy": heavy}))
""" % (HEAVY,))


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_help_of_every_command_imports_no_torch_transformers_or_datasets():
    result = _run("-c", _HELP_EVERYWHERE)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"finetune", "distill", "export", "eval", "run", "attach-ghost", "share-layers"} <= set(got["names"])
    assert all(code == 0 and printed for code, printed in got["codes"].values()), got["codes"]
    assert got["heavy"] == [], f"--help imported {got['heavy']}: defer them into the command bodies"


def test_help_starts_quickly():
    _run("-m", "ghostify", "--help")  # warm the file cache (.pyc) first
    start = time.perf_counter()
    result = _run("-m", "ghostify", "--help")
    seconds = time.perf_counter() - start
    assert result.returncode == 0 and "attach-ghost" in result.stdout, result.stderr[-2000:]
    assert seconds < 3, f"`ghostify --help` took {seconds:.1f}s"  # about 0.3 s on a quiet machine; loose under load


def test_version_names_ghostify_torch_and_transformers(capsys):
    from ghostify.cli.app import main

    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (f"ghostify {ghostify.__version__} (torch {metadata.version('torch')}, "
                   f"transformers {metadata.version('transformers')})")


def test_show_completion_prints_a_bash_script():
    result = _run("-m", "ghostify", "--show-completion", "bash")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "_GHOSTIFY_COMPLETE" in result.stdout and "complete " in result.stdout
