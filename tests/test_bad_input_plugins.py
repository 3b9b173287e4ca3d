"""Broken plug-ins (issue 36, items 1-5 and more): a package on PYTHONPATH whose ``ghostify.methods``
entry point fails to load, is no Method, or takes a name or command that is registered already costs
that plug-in alone. ``--help`` and ghostify's own commands work with one warning per broken plug-in
(naming its entry point and distribution, and why), ``--version`` loads no plug-in at all, and a
command that needs the broken plug-in (a checkpoint its method wrote) is one `error:` line. Inputs are
hashed before and after, as in ``tests/test_bad_input.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .conftest import every_day_rows
from .test_bad_input import _beside, _snapshot, world  # noqa: F401

#: a plug-in method's declaration; ``{field}`` is its settings field, ``{package}`` its package
DECLARATION = '''
from dataclasses import dataclass

from ghostify.methods import Method, lazy, setting


@dataclass(frozen=True)
class Settings:
    {field}


def describe(info):
    return [("{noun}", "yes")] if info.get("{name}") else []


METHOD = Method(name="{name}", command="{command}", noun="{noun}", settings=Settings,
                apply=lazy("{package}.hooks:apply"), restore=lazy("{package}.hooks:restore"), describe=describe,
                help="A test plug-in that changes nothing.")
'''
HOOKS = '''
from ghostify.methods import Entry


def apply(model, record, settings, context):
    return Entry(format=1, data={"done": True})


def restore(model, adapter, record, source):
    return None
'''
FIELD = 'factor: float = setting(2.0, help="A number.")'


def _method(name: str, command: str, field: str = FIELD) -> dict[str, str]:
    """The files of a package whose METHOD is a Method named ``name`` with the command ``command``."""
    package = f"gp_{name.replace('-', '_')}"
    return {f"{package}/__init__.py": DECLARATION.format(field=field, package=package, name=name, command=command,
                                                          noun=f"{name} things"),
            f"{package}/hooks.py": HOOKS}


SLOW = 'import time\ntime.sleep(120)  # an import that hangs (a network mount, a lock): --help must not wait\n'

#: the plug-ins of the cases: (distribution, {entry point: value}, {file: text}); an entry point is named after the
#: command (the contract: `ghostify --help` lists it without importing the plug-in), but where a case says otherwise
PLUGINS: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {
    # issue 36, items 1-5
    "raises": ("ghostify-raises", {"raises": "gp_raises:METHOD"},
               {"gp_raises/__init__.py": 'raise RuntimeError("the plug-in is broken on purpose")\n'}),
    "not-a-method": ("ghostify-not-a-method", {"notamethod": "gp_not_a_method:METHOD"},
                     {"gp_not_a_method/__init__.py": 'METHOD = {"name": "scale"}\n'}),
    "missing-module": ("ghostify-missing-module", {"missing": "gp_not_installed:METHOD"}, {}),
    "prune-again": ("ghostify-prune-again", {"myprune": "gp_myprune:METHOD"}, _method("myprune", "prune")),
    "ghost-again": ("ghostify-ghost-again", {"ghost-twice": "gp_ghost:METHOD"}, _method("ghost", "ghost-twice")),
    # more of the same kind
    "missing-attribute": ("ghostify-missing-attribute", {"scale-it": "gp_scale:NOT_THERE"}, _method("scale", "scale-it")),
    "syntax-error": ("ghostify-syntax-error", {"syntax": "gp_syntax:METHOD"}, {"gp_syntax/__init__.py": "def broken(:\n"}),
    "exits": ("ghostify-exits", {"exits": "gp_exits:METHOD"}, {"gp_exits/__init__.py": "import sys\nsys.exit(3)\n"}),
    "settings-not-dataclass": ("ghostify-settings-dict", {"no-dataclass": "gp_nodc:METHOD"},
                               {"gp_nodc/__init__.py": textwrap.dedent('''
                                   from ghostify.methods import Method, lazy

                                   METHOD = Method(name="nodc", command="no-dataclass", noun="x", settings=dict,
                                                   restore=lazy("m:r"), describe=lambda info: [])
                                   ''')}),
    "name-is-a-command": ("ghostify-name-is-a-command", {"prune-more": "gp_prune:METHOD"}, _method("prune", "prune-more")),
    "union-option": ("ghostify-union-option", {"union-it": "gp_union:METHOD"},
                     _method("union", "union-it", 'factor: "int | str" = setting(2, help="Either.")')),
    "option-named-output": ("ghostify-option-named-output", {"out-option": "gp_outopt:METHOD"},
                            _method("outopt", "out-option", 'output: str = setting("x", help="Clashes with -o.")')),
    "bad-option-argument": ("ghostify-bad-option-argument", {"bad-option": "gp_badopt:METHOD"},
                            _method("badopt", "bad-option", 'factor: int = setting(2, help="x", bogus=1)')),
    "good": ("ghostify-good", {"good-plugin": "gp_good:METHOD"}, _method("good", "good-plugin")),
    "good-again": ("ghostify-good-again", {"good-plugin-2": "gp_good2:METHOD"},
                   {k.replace("gp_good/", "gp_good2/"): v.replace("gp_good.", "gp_good2.")
                    for k, v in _method("good", "good-plugin-2").items()}),
    # issue 48: an import that hangs; an entry point named otherwise than its command (the contract before)
    "slow": ("ghostify-slow", {"slow-plugin": "gp_slow:METHOD"}, {"gp_slow/__init__.py": SLOW}),
    "old-style": ("ghostify-old-style", {"scale": "gp_old:METHOD"}, _method("old", "scale-old")),
}
#: the distributions' summaries (their one-line help in `ghostify --help`)
SUMMARIES = {"good": "A good test plug-in.", "slow": "A plug-in whose import hangs."}


def _install(root: Path, key: str) -> Path:
    """``PLUGINS[key]`` as an installed distribution: its files and a ``*.dist-info`` with its entry points."""
    distribution, points, files = PLUGINS[key]
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    summary = f"Summary: {SUMMARIES[key]}\n" if key in SUMMARIES else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n{summary}")
    (info / "entry_points.txt").write_text("[ghostify.methods]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """One directory per plug-in (put on PYTHONPATH alone or with another)."""
    root = tmp_path_factory.mktemp("plugins")
    for key in PLUGINS:
        _install(root / key, key)
    return root


def _ghostify(site: Path, plugins: list[str], *args, cwd: Path | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    paths = [str(site / key) for key in plugins] + [os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), OMP_NUM_THREADS="1")
    env.pop("GHOSTIFY_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ghostify", *map(str, args)], env=env, capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def _named(key: str) -> list[str]:
    """What the warning about plug-in ``key`` names: its entry point, what it points at and its distribution."""
    distribution, points, _ = PLUGINS[key]
    name, value = next(iter(points.items()))
    return [f"{name} = {value}", distribution]


NOT_LOADED = "which is not loaded: "
# (id, plug-ins on the path, arguments, exit code, what the one warning says, what the one error says or None).
# A plug-in is imported when a command needs the registry (its own, or one that reads a checkpoint or a recipe),
# never for --help (test_help_imports_no_plugin)
CASES: list[tuple[str, list[str], list[str], int, str, str | None]] = [
    # issue 36, items 1-5 (issue 48: the plug-in's own command, not --help, imports it)
    ("raises-command", ["raises"], ["raises", "--help"], 2, "RuntimeError: the plug-in is broken on purpose",
     "the command raises is the plug-in raises = gp_raises:METHOD (ghostify.methods entry point of the distribution "
     "ghostify-raises), " + NOT_LOADED + "RuntimeError: the plug-in is broken on purpose; fix or uninstall it"),
    ("not-a-method-command", ["not-a-method"], ["notamethod"], 2, "it is a dict, not a ghostify Method",
     NOT_LOADED + "it is a dict"),
    ("missing-module-command", ["missing-module"], ["missing", "--help"], 2,
     "ModuleNotFoundError: No module named 'gp_not_installed'", NOT_LOADED + "ModuleNotFoundError"),
    ("prune-again-keeps-the-shipped-prune", ["prune-again"], ["prune", "{m}", "-o", "{out}", "--width", "0.5"], 0,
     "command 'prune') is registered already: pruning (command prune)", None),
    ("ghost-again-keeps-attach-ghost", ["ghost-again"], ["attach-ghost", "{m}", "-o", "{out}"], 0,
     "a method named 'ghost' (command 'ghost-twice') is registered already", None),
    ("ghost-again-by-its-command", ["ghost-again"], ["ghost-twice", "{m}", "-o", "{out}"], 2,
     "a method named 'ghost' (command 'ghost-twice') is registered already", NOT_LOADED + "a method named 'ghost'"),
    # more: other ways to break, and what still works
    ("raises-info", ["raises"], ["info", "{pruned}"], 0, "RuntimeError", None),
    ("missing-attribute", ["missing-attribute"], ["scale-it", "{m}", "-o", "{out}"], 2, "AttributeError",
     NOT_LOADED + "AttributeError"),
    ("syntax-error", ["syntax-error"], ["syntax"], 2, "SyntaxError", NOT_LOADED + "SyntaxError"),
    ("exits-on-import", ["exits"], ["exits", "--help"], 2, "SystemExit: 3", NOT_LOADED + "SystemExit: 3"),
    ("settings-not-a-dataclass", ["settings-not-dataclass"], ["no-dataclass", "--help"], 2, "are not a dataclass",
     NOT_LOADED + "its settings <class 'dict'> are not a dataclass"),
    ("name-is-a-shipped-command", ["name-is-a-command"], ["prune", "{m}", "-o", "{out}", "--width", "0.5"], 0,
     "a method named 'prune' (command 'prune-more') is registered already", None),
    ("union-option-type", ["union-option"], ["union-it", "--help"], 2, "its command union-it is left out (AssertionError",
     "No such command 'union-it'"),
    ("option-named-output", ["option-named-output"], ["out-option", "{m}", "-o", "{out}"], 2,
     "its command out-option is left out (ValueError", "No such command 'out-option'"),
    ("bad-option-argument", ["bad-option-argument"], ["bad-option", "--help"], 2,
     "its command bad-option is left out (TypeError", "No such command 'bad-option'"),
    ("second-plugin-of-one-name", ["good", "good-again"], ["good-plugin", "{m}", "-o", "{out}"], 0,
     "a method named 'good' (command 'good-plugin-2') is registered already: good (command good-plugin)", None),
    ("dry-run-with-a-broken-plugin", ["missing-module"], ["run", "{world}/r.yaml", "-o", "{out}", "--dry-run"], 0,
     "ModuleNotFoundError", None),
    ("unknown-command-with-a-broken-plugin", ["raises"], ["squeeze", "{m}"], 2, "RuntimeError", "No such command 'squeeze'"),
    # issue 48: a plug-in whose entry point is not named after its command (the contract before) still runs, by
    # either name, with one warning saying what to rename
    ("old-style-by-its-command", ["old-style"], ["scale-old", "{m}", "-o", "{out}"], 0,
     "its command is scale-old, but its entry point is named scale", None),
    ("old-style-by-its-entry-point", ["old-style"], ["scale", "{m}", "-o", "{out}"], 0,
     "name the entry point scale-old", None),
    # a command that needs the broken plug-in: one error, which says why (not "install the plug-in")
    ("checkpoint-of-a-broken-plugin", ["raises"], ["info", "{records}/record-raises"], 2, "RuntimeError",
     "records the method 'raises' of the plug-in raises = gp_raises:METHOD (ghostify.methods entry point of the "
     "distribution ghostify-raises), which is not loaded: RuntimeError: the plug-in is broken on purpose"),
    ("checkpoint-of-a-refused-plugin", ["prune-again"], ["attach-ghost", "{records}/record-myprune", "-o", "{out}"], 2,
     "registered already", "records the method 'myprune' of the plug-in myprune = gp_myprune:METHOD"),
]


@pytest.fixture(scope="module")
def records(world, tmp_path_factory) -> Path:  # noqa: F811
    """Checkpoints whose record has an entry of a plug-in (as if it wrote them): ``raises``, ``myprune``."""
    root = tmp_path_factory.mktemp("plugin-records")
    for method in ("raises", "myprune"):
        target = root / f"record-{method}"
        shutil.copytree(world / "pruned", target)
        config = json.loads((target / "config.json").read_text())
        config["ghostify"]["methods"][method] = {"format": 1}
        (target / "config.json").write_text(json.dumps(config))
    return root


#: one row of each way a broken plug-in is handled, every day (the others meet the same handling: --all)
#: (a second plug-in of one name and an old-style one by its command: the full run's, handled as prune-again and
#: ghost-again are)
EVERY_DAY = ("raises-command", "not-a-method-command", "prune-again-keeps-the-shipped-prune", "ghost-again-by-its-command",
             "exits-on-import", "settings-not-a-dataclass", "union-option-type", "dry-run-with-a-broken-plugin",
             "checkpoint-of-a-broken-plugin")


@pytest.mark.parametrize(("name", "plugins", "args", "code", "warning", "error"), every_day_rows(CASES, EVERY_DAY))
def test_a_broken_plugin_costs_only_itself(name, plugins, args, code, warning, error, site, world, records,  # noqa: F811
                                           tmp_path):
    out = tmp_path / "out"
    filled = [a.replace("{m}", str(world / "m")).replace("{pruned}", str(world / "pruned")).replace("{world}", str(world))
              .replace("{records}", str(records)).replace("{out}", str(out)) for a in args]
    before, beside = [_snapshot(world), _snapshot(records)], _beside(out)
    done = _ghostify(site, plugins, *filled)
    stderr = done.stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:") and "plug-in" in line]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == code, stderr
    assert "Traceback" not in done.stdout + stderr
    broken = [key for key in plugins if key not in ("good",)]  # every plug-in but the first good one is broken
    assert len(warnings) == len(broken), stderr  # one line per broken plug-in, and only them
    assert warning in warnings[0], warnings[0]
    assert all(part in warnings[0] for part in _named(broken[0])), warnings[0]
    assert errors == ([] if error is None else errors[:1]) and len(errors) == (error is not None), stderr
    if error is not None:
        assert error in errors[0], errors[0]
    assert [_snapshot(world), _snapshot(records)] == before, "an input changed"
    if code == 0 and "-o" in args and "--dry-run" not in args:
        assert (out / "config.json").is_file()  # the shipped (or the good) command did its work
    else:
        assert not out.exists() and _beside(out) == beside


def test_help_imports_no_plugin(site):
    """Issue 48: `ghostify --help` imported every plug-in (their commands were made from the loaded Method), so one
    whose import hangs hung it. Now it lists each plug-in's command by its entry point's name, with its
    distribution's summary, from the installed metadata: quickly, with no warning, whatever the plug-ins do on
    import. Listed, a broken plug-in's command says what is wrong with it when it is run (the cases above)."""
    plugins = ["slow", "raises", "good", "prune-again", "exits"]
    _ghostify(site, plugins, "--version")  # warm the file cache (.pyc) first
    started = time.perf_counter()
    done = _ghostify(site, plugins, "--help", timeout=60)
    seconds = time.perf_counter() - started
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in done.stdout.splitlines() if line.startswith("  ")}
    for command in ("prune", "attach-ghost", "drop-layers", "raises", "exits"):
        assert command in rows, done.stdout
    assert rows["good-plugin"] == "A good test plug-in. (the plug-in ghostify-good)"
    assert rows["slow-plugin"].startswith("A plug-in whose import hangs.")
    assert rows["raises"] == "A method of the plug-in ghostify-raises."
    assert rows["prune"].startswith("Physically prune")  # the shipped command, whatever a plug-in declares
    assert seconds < 2, f"`ghostify --help` took {seconds:.1f}s with a plug-in whose import hangs"
    # a command that names no plug-in needs none imported either
    done = _ghostify(site, ["slow"], "prune", "--help", timeout=60)
    assert done.returncode == 0 and "--width" in done.stdout and done.stderr == "", done.stderr


def test_a_plugin_command_and_its_help_import_it(site, world, tmp_path):  # noqa: F811
    """What --help listed runs: its own --help (the Method's help and options) and the command itself."""
    done = _ghostify(site, ["good"], "good-plugin", "--help")
    assert done.returncode == 0 and "A test plug-in that changes nothing." in done.stdout and "--factor" in done.stdout
    done = _ghostify(site, ["good"], "good-plugin", world / "m", "-o", tmp_path / "out", "--factor", "3")
    assert done.returncode == 0 and (tmp_path / "out" / "config.json").is_file(), done.stderr


def test_the_shipped_prune_keeps_its_options(site, world, tmp_path):  # noqa: F811
    """Item 4: the plug-in with the command `prune` replaced the shipped one (`No such option: --width`)."""
    done = _ghostify(site, ["prune-again"], "prune", "--help")
    assert done.returncode == 0 and "--width" in done.stdout and "--speedup" in done.stdout, done.stderr


@pytest.mark.parametrize("plugins", [["raises"], ["missing-module"], ["not-a-method", "exits", "syntax-error"]],
                         ids=["raises", "missing-module", "three"])
def test_version_loads_no_plugin(site, plugins):
    """Item 3: `--version` printed a traceback for a missing module; it needs no plug-in, so it loads none."""
    from ghostify.cli.app import version_line

    done = _ghostify(site, plugins, "--version")
    assert done.returncode == 0 and done.stdout.strip() == version_line() and done.stderr == "", done.stderr


def test_the_registry_of_the_library_lists_the_broken_plugins(site):
    """In Python (no CLI): the registry loads, the broken plug-ins are listed with their problem, one warning each."""
    script = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from ghostify.methods import broken_plugins, by_name, methods
            names = [m.name for m in methods()]
        print(names.count("ghost"), "good" in names, by_name("ghost").command)
        print(sorted((p.name, p.distribution) for p in broken_plugins()))
        print(len([w for w in caught if "plug-in" in str(w.message)]))
    """)
    paths = [str(site / key) for key in ("raises", "ghost-again", "good")] + [os.environ.get("PYTHONPATH", "")]
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=os.pathsep.join(paths)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 True attach-ghost",
                                        "[('ghost-twice', 'ghostify-ghost-again'), ('raises', 'ghostify-raises')]", "2"]
