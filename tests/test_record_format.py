"""The record as ``heads, ffn, methods: {name: entry}`` (format 2): checkpoints written with format 1
(one top-level field per method) still load to the same outputs; unknown or newer entries are
refused in one line; and a method from another package is a plug-in: registered through the
``ghostify.methods`` entry point group, with no file of ghostify changed, it shows in the CLI,
``run --dry-run``, ``info`` and ``export``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ghostify import load_model
from ghostify.checkpoint import model_record, save_checkpoint
from ghostify.errors import CheckpointError, GhostifyError
from ghostify.record import RECORD_FORMAT, GhostifyRecord
from ghostify.testing import tiny_batch, tiny_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "record-format-1"
OLD = ["pruned-ghost", "grouped", "factorized-shared", "references"]


@pytest.mark.parametrize("name", OLD)
def test_a_format_1_checkpoint_loads_to_the_outputs_it_had(name, tmp_path):
    expected = load_file(str(FIXTURES / "expected_logits.safetensors"))[name]
    model = load_model(FIXTURES / name)
    with torch.no_grad():
        logits = model(**tiny_batch(3, 9, seed=0)).logits
    # the fixture was computed on another CPU, whose kernels round differently (seen: 1.6e-9 apart between
    # an AMD EPYC and an Intel Xeon); a ghost kernel read wrong moves them by ~2e-6, 1e-3 of their scale
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5 * expected.abs().max().item())
    record = model_record(model)
    old = json.loads((FIXTURES / name / "config.json").read_text())["ghostify"]
    assert old["format"] == 1 and "methods" not in old
    assert set(record.methods) == {k for k, v in old.items() if isinstance(v, dict)}
    # written again, it is format 2 and still the same model
    save_checkpoint(model, tmp_path / "again", record)
    new = json.loads((tmp_path / "again" / "config.json").read_text())["ghostify"]
    assert new["format"] == RECORD_FORMAT == 2 and set(new["methods"]) == set(record.methods)
    assert not set(new) - {"heads", "ffn", "methods", "history", "format"}
    with torch.no_grad():  # on one machine, save → load is exact
        torch.testing.assert_close(load_model(tmp_path / "again")(**tiny_batch(3, 9, seed=0)).logits, logits,
                                   rtol=0, atol=0)


def _edit(path: Path, edit) -> None:
    config = json.loads((path / "config.json").read_text())
    edit(config["ghostify"])
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["methods"].__setitem__("telepathy", {"format": 1}), "method 'telepathy' that this ghostify does not know"),
    (lambda r: r["methods"]["ghost"].__setitem__("format", 9), "newer ghostify (ghost record format 9)"),
    (lambda r: r["methods"].__setitem__("ghost", [1, 2]), "methods.ghost = [1, 2]: expected a mapping"),
    (lambda r: r.__setitem__("methods", [1]), "methods = [1]: expected a mapping"),
    (lambda r: r.__setitem__("format", 3), "newer ghostify (record format 3)"),
], ids=["unknown-method", "newer-entry", "entry-not-mapping", "methods-not-mapping", "newer-record"])
def test_an_entry_no_method_reads_is_refused_in_one_line(tmp_path, edit, message):
    shutil.copytree(FIXTURES / "pruned-ghost", tmp_path / "m")
    load_model(tmp_path / "m")  # format 1: read
    model = load_model(tmp_path / "m")
    save_checkpoint(model, tmp_path / "new", model_record(model))
    _edit(tmp_path / "new", edit)
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        load_model(tmp_path / "new")


def test_an_unknown_record_field_cannot_be_set_by_mistake():
    record = GhostifyRecord.dense(2, 4, 37)
    with pytest.raises(AttributeError):
        record.ghost = {"format": 1}  # the format-1 spelling: an error, not a silently dropped field


PLUGIN = '''
"""A plug-in method for the test: scales the word embeddings by a factor (no new structure)."""
from dataclasses import dataclass

from ghostify.methods import Entry, Method, lazy, setting


@dataclass(frozen=True)
class ScaleSettings:
    factor: float = setting(2.0, help="Multiply the word embeddings by this.")


def describe(info):
    entry = info.get("scale")
    return [("scaled embeddings", f"x{entry['factor']:g}")] if entry else []


METHOD = Method(name="scale", command="scale-embeddings", noun="scaled embeddings", settings=ScaleSettings,
                apply=lazy("ghostify_scale_plugin.hooks:apply"), restore=lazy("ghostify_scale_plugin.restore:restore"),
                describe=describe, before=("ghost",), tag="scaled",
                help="Scale the word embeddings (a test plug-in).")
'''

HOOKS = '''
import torch

from ghostify.methods import Entry


def apply(model, record, settings, context):
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(settings.factor)
    return Entry(format=1, data={"factor": settings.factor})
'''

RESTORE = '''
def restore(model, adapter, record, source):
    return None  # nothing to rebuild: the weights carry the change
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> dict[str, str]:
    """An installed package that registers a method through the entry point group (on PYTHONPATH)."""
    root = tmp_path_factory.mktemp("plugin")
    package = root / "ghostify_scale_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (package / "hooks.py").write_text(textwrap.dedent(HOOKS))
    (package / "restore.py").write_text(textwrap.dedent(RESTORE))
    info = root / "ghostify_scale_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghostify-scale-plugin\nVersion: 0.1\n"
                                   "Summary: Scale the word embeddings.\n")
    # the entry point is named after the command: `ghostify --help` lists it without importing the plug-in
    (info / "entry_points.txt").write_text("[ghostify.methods]\nscale-embeddings = ghostify_scale_plugin:METHOD\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    return env


def _ghostify(env, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ghostify", *map(str, args)], env=env, capture_output=True, text=True,
                          cwd=cwd, timeout=600)


#: runs each command line of argv[1] (JSON) through the CLI in this one process, in turn, and prints what each
#: returned and wrote: one fresh Python for a sequence of commands instead of one each (about 5 s apiece)
_IN_TURN = """
import contextlib, io, json, sys
from ghostify.cli.app import main
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
sys.stdout.write(json.dumps(results))
"""


def _ghostify_in_turn(env, *calls) -> list[subprocess.CompletedProcess]:
    """``_ghostify`` of each of ``calls`` (argument lists), in one fresh process with ``env``."""
    argvs = [[str(a) for a in call] for call in calls]
    done = subprocess.run([sys.executable, "-c", _IN_TURN, json.dumps(argvs)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return [subprocess.CompletedProcess(argv, r["returncode"], r["stdout"], r["stderr"])
            for argv, r in zip(argvs, json.loads(done.stdout))]


@pytest.mark.slow  # the full run (plug-ins load and run daily in test_bad_input_plugins)
def test_a_plugin_method_is_a_command_a_stage_an_info_row_and_exports(plugin, tmp_path):
    tiny_checkpoint(tmp_path / "m")
    # its order rule holds in a recipe, checked before anything runs
    (tmp_path / "r.yaml").write_text(f"model: {tmp_path / 'm'}\nstages:\n  - scale-embeddings: {{factor: 2}}\n"
                                     "  - attach-ghost: {}\n")
    (tmp_path / "bad.yaml").write_text(f"model: {tmp_path / 'm'}\nstages:\n  - attach-ghost: {{}}\n"
                                       "  - scale-embeddings: {}\n")
    listed, helped, done, shown, dry, refused, exported = _ghostify_in_turn(
        plugin, ["--help"], ["scale-embeddings", "--help"],
        ["scale-embeddings", tmp_path / "m", "-o", tmp_path / "s", "--factor", "3"], ["info", tmp_path / "s"],
        ["run", tmp_path / "r.yaml", "-o", tmp_path / "run", "--dry-run"],
        ["run", tmp_path / "bad.yaml", "-o", tmp_path / "run2", "--dry-run"],
        ["export", tmp_path / "s", "-o", tmp_path / "hf"])
    # from the installed metadata (the plug-in not imported yet): the entry point's name, the summary
    assert "scale-embeddings Scale the word embeddings. (the plug-in ghostify-scale-plugin)" in " ".join(listed.stdout.split())
    assert helped.returncode == 0 and "--factor" in helped.stdout and "Scale the word embeddings" in helped.stdout
    assert done.returncode == 0, done.stderr
    assert "scaled embeddings: x3" in done.stderr
    record = json.loads((tmp_path / "s" / "config.json").read_text())["ghostify"]
    assert record["methods"]["scale"] == {"factor": 3.0, "format": 1}
    assert shown.returncode == 0 and "x3" in shown.stdout
    assert dry.returncode == 0, dry.stderr
    assert refused.returncode != 0 and "scale-embeddings before attach-ghost" in refused.stderr
    # exported with the plug-in's restore code beside it; loads without ghostify and without the plug-in
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "hf" / "ghostify_scale_plugin_restore.py").is_file()
    # without the plug-in, a checkpoint that has its entry is refused in one line
    bare = _ghostify(dict(os.environ), "info", tmp_path / "s")
    assert bare.returncode != 0 and "method 'scale' that this ghostify does not know" in bare.stderr
    assert "Traceback" not in bare.stderr


def test_registering_a_method_twice_is_refused():
    from ghostify.methods import by_name, register

    with pytest.raises(GhostifyError, match="registered already"):
        register(by_name("ghost"))


def test_a_method_registered_after_the_recipe_module_is_a_stage(plugin, tmp_path):
    """``ghostify.methods.register`` at run time (no entry point): the recipe schema reads the registry when a
    recipe is validated, not when ``ghostify.recipe`` was imported."""
    root = next(Path(p) for p in plugin["PYTHONPATH"].split(os.pathsep) if p and (Path(p) / "ghostify_scale_plugin").is_dir())
    bare = tmp_path / "no-entry-point"
    shutil.copytree(root / "ghostify_scale_plugin", bare / "ghostify_scale_plugin")  # the package, no dist-info
    tiny_checkpoint(tmp_path / "m")
    (tmp_path / "r.yaml").write_text(f"model: {tmp_path / 'm'}\nstages:\n  - scale-embeddings: {{factor: 2}}\n")
    script = textwrap.dedent(f"""
        from ghostify import recipe as recipes
        from ghostify.recipe import RecipeError
        try:
            recipes.load({str(tmp_path / 'r.yaml')!r})
        except RecipeError as exc:
            print("before:", exc)
        from ghostify.methods import register
        from ghostify_scale_plugin import METHOD
        register(METHOD)
        loaded = recipes.load({str(tmp_path / 'r.yaml')!r})
        print("after:", [s.command.name for s in loaded.stages], "factor" in recipes.schema.stage_keys("scale-embeddings"))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(bare), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "before:" in done.stdout and "unknown stage 'scale-embeddings'" in done.stdout
    assert "after: ['scale-embeddings'] True" in done.stdout
