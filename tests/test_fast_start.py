"""`ghostify --help`, every `ghostify COMMAND --help` and `--version` start without torch,
transformers or datasets (seconds of imports); shell completion is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import pytest

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


def _run(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


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
    # typer takes the shell's name only where it does not detect the shell from the process tree itself (which a
    # run started by nohup or a CI runner may not have): say which, as its own tests do
    result = _run("-m", "ghostify", "--show-completion", "bash",
                  env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "_GHOSTIFY_COMPLETE" in result.stdout and "complete " in result.stdout


#: (command line, what its one line says): inputs refused before any library loads
_REFUSED_AT_ONCE = [
    (["eval", "{m}", "--task", "sst2", "--dataset", "{tmp}/glu"], "dataset directory {tmp}/glu does not exist"),
    (["eval", "{tmp}/no-model", "--task", "sst2"], "checkpoint {tmp}/no-model does not exist"),
    (["eval", "{tmp}/model.onnx", "--task", "sst2"], "ONNX model {tmp}/model.onnx does not exist"),
    (["eval", "{m}", "--task", "sst3"], "unknown task 'sst3'"),
    (["eval", "{m}", "--task", "sst2", "--metric", "accuracyy"], "unknown --metric 'accuracyy'"),
    (["finetune", "{m}", "-o", "{tmp}/f", "--task", "sst2", "--validation-file", "{tmp}/v.csv"], "--validation-file {tmp}/v.csv is not a file"),
    (["finetune", "{m}", "-o", "{tmp}/f", "--task", "sst2", "--mixed-precision", "fp8"], "--mixed-precision 'fp8'"),
    (["distill", "--teacher", "{tmp}/t", "--student", "{m}", "-o", "{tmp}/d", "--task", "sst2"], "checkpoint {tmp}/t does not exist"),
    (["prune", "{m}", "-o", "{tmp}/p", "--width", "0.5", "--importance", "{tmp}/scores"], "--importance {tmp}/scores does not exist"),
    (["prune", "{m}", "-o", "{tmp}/p", "--speedup", "2", "--latency", "{tmp}/lat"], "latency model {tmp}/lat does not exist"),
    (["prune", "{m}", "-o", "{tmp}/a-file", "--width", "0.5", "--overwrite"], "output {tmp}/a-file exists and is a file"),
    (["run", "{tmp}/recipe.yaml", "-o", "{tmp}/r"], "recipe {tmp}/recipe.yaml does not exist"),
    (["bench", "{m}", "{tmp}/other"], "checkpoint {tmp}/other does not exist"),
    (["compress", "{m}", "-o", "{tmp}/c", "--speedup", "2", "--dataset", "{tmp}/data"], "dataset directory {tmp}/data does not exist"),
    (["augment", "--mlm", "{tmp}/mlm", "--task", "sst2", "-o", "{tmp}/a"], "checkpoint {tmp}/mlm does not exist"),
]

_REFUSE = textwrap.dedent("""
    import contextlib, io, json, sys, time

    start = time.perf_counter()
    from ghostify.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(json.loads(sys.argv[1]))
    print(json.dumps({"code": code, "err": err.getvalue(), "seconds": time.perf_counter() - start,
                      "heavy": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,))


@pytest.mark.parametrize(("args", "said"), _REFUSED_AT_ONCE, ids=[" ".join(a[:1] + a[-2:]) for a, _ in _REFUSED_AT_ONCE])
def test_a_missing_path_or_unknown_name_is_refused_before_torch_loads(args, said, tmp_path):
    """The issue: `eval --dataset ../shared/data/glu` took 15.9 s to say the directory does not exist."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "a-file").write_text("")
    filled = [a.format(m=model, tmp=tmp_path) for a in args]
    result = _run("-c", _REFUSE, json.dumps(filled))
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    lines = got["err"].strip().splitlines()
    assert got["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), got
    assert said.format(tmp=tmp_path) in lines[0], lines[0]
    assert got["heavy"] == [], f"{args[0]} imported {got['heavy']} before refusing"
    assert got["seconds"] < 2, f"took {got['seconds']:.1f}s"  # about 0.3 s (the CLI's start) on a quiet machine


#: runs the console script's entry point and reports OMP_WAIT_POLICY as it was when torch was first imported
_WAIT_POLICY_AT_TORCH_IMPORT = textwrap.dedent("""
    import atexit, json, os, sys

    seen = {}

    class Spy:  # a finder that only looks: notes the variable the moment torch is imported
        def find_spec(self, name, path=None, target=None):
            if name == "torch" and "torch" not in seen:
                seen["torch"] = [os.environ.get("OMP_WAIT_POLICY"), os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")]
            return None

    sys.meta_path.insert(0, Spy())
    atexit.register(lambda: print(json.dumps(seen)))
    sys.argv = ["ghostify", "info", sys.argv[1]]
    from ghostify.cli import run

    run()
""")


#: the user's own settings (ACTIVE, 2048) are the full run's: the command sets the variables only where they are unset
@pytest.mark.parametrize("env, expected", [
    ({}, ["PASSIVE", "8192"]),
    pytest.param({"OMP_WAIT_POLICY": "ACTIVE", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "2048"}, ["ACTIVE", "2048"],
                 marks=pytest.mark.slow)])
def test_the_command_line_lets_idle_threads_sleep_unless_told_otherwise(env, expected, tmp_path):
    """Issue 39: spinning OpenMP workers tripled the CPU a run took on a shared machine. The command
    sets OMP_WAIT_POLICY=PASSIVE before torch loads (libgomp reads it then); the user's own setting wins.
    Issue 46: likewise oneDNN's primitive cache, sized for a training run's shapes (threads.py)."""
    import os

    from ghostify.testing import tiny_checkpoint

    model = tiny_checkpoint(tmp_path / "model")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    result = subprocess.run([sys.executable, "-c", _WAIT_POLICY_AT_TORCH_IMPORT, str(model)], capture_output=True,
                            text=True, cwd=REPO, timeout=300, env={**clean, "OMP_NUM_THREADS": "1", **env})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"torch": expected}


def test_thread_defaults_keep_what_the_user_set():
    from ghostify.threads import set_thread_defaults

    for given, expected in [({}, {"OMP_WAIT_POLICY": "PASSIVE"}), ({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "active"}),
                            ({"GOMP_SPINCOUNT": "10000"}, {"GOMP_SPINCOUNT": "10000"}),
                            ({"OMP_WAIT_POLICY": ""}, {"OMP_WAIT_POLICY": "PASSIVE"})]:
        environ = dict(given)
        set_thread_defaults(environ)
        assert environ == expected, given


def test_the_kernel_cache_default_keeps_what_the_user_set():
    from ghostify.threads import DEFAULT_KERNEL_CACHE, set_kernel_cache_default

    for given, expected in [({}, DEFAULT_KERNEL_CACHE), ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}, "0"),
                            ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": ""}, DEFAULT_KERNEL_CACHE)]:
        environ = dict(given)
        set_kernel_cache_default(environ)
        assert environ == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": expected}, given
