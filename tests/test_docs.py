"""Issue 39: the documentation builds, and what it shows is real.

* README.md stays short (at most 300 lines); the site under ``docs/`` (MkDocs) builds with
  ``--strict`` (every link and anchor resolves), its command reference is the CLI's own ``--help``, and
  the "Studies and benchmarks" page links every results file and study.
* Every ``ghostify`` command line the docs show — in ``bash`` blocks and in inline code — names a real
  command and only its real options; a benchmark script it runs exists and takes the flags given.
* Every path into a recipe's run directory the docs name (``runs/quick/08-onnx/model_int8.onnx``) is a
  stage the recipe plans, and for the quickstart exists after a (tiny) run of it.
* Every duration the docs give (minutes, a run's seconds) says on which machine, with how many threads
  and at what load it was measured.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from .conftest import REPO
from .test_scores_only import quick_run  # noqa: F401  (the quickstart recipe run on a tiny model)

DOCS = REPO / "docs"
#: the Markdown a reader sees: the README and the site's own pages (the included benchmark pages carry
#: their own command and machine lines, written by the scripts)
PAGES = [REPO / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"


def _hook():
    spec = importlib.util.spec_from_file_location("ghostify_docs_hook", DOCS / "hooks" / "ghostify_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail into docs/ (at most 300)"


def test_the_site_builds_strictly_with_the_generated_command_reference(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", OMP_NUM_THREADS="1")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    reference = (site / "reference" / "commands" / "index.html").read_text()
    commands = [name for name in _hook().command_helps() if name]
    assert {"importance", "prune", "prune-hidden", "compress", "latency", "run", "export", "bench"} <= set(commands)
    for name in commands:
        assert f'id="ghostify-{name}"' in reference, name
    assert "--ghost-learning-rate" in reference and "--prune-hidden" in reference
    for page in ("benchmarks/index.html", "benchmarks/results/compress/index.html", "studies/index.html"):
        assert (site / page).is_file(), page


def test_the_command_reference_is_what_help_prints(capsys, monkeypatch):
    """The generated page shows each command's --help as a pipe or a CI log gets it (80 columns)."""
    from ghostify.cli.app import main

    monkeypatch.setenv("COLUMNS", "80")
    helps = _hook().command_helps()
    for name, text in helps.items():
        capsys.readouterr()
        main([*([name] if name else []), "--help"])
        assert capsys.readouterr().out == text, name


def test_the_studies_page_links_every_results_file_and_study():
    page = (DOCS / "studies.md").read_text()
    linked = {(DOCS / target).resolve() for target in re.findall(r"\]\(([^)#\s]+)", page)}
    wanted = [*sorted((REPO / "benchmarks" / "results").glob("*.md")),
              *sorted((REPO / "benchmarks" / "studies").glob("*/README.md")), REPO / "benchmarks" / "README.md"]
    missing = [str(p.relative_to(REPO)) for p in wanted if p.resolve() not in linked]
    assert not missing, f"add a line for each to docs/studies.md: {missing}"


# ----- commands ----------------------------------------------------------------------------------
@cache
def _cli() -> dict[str, set[str]]:
    """Each command's option names (``""``: ``ghostify``'s own), from the Click commands."""
    import click
    import typer

    from ghostify.cli import app

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="ghostify")
    found = {"": {o for p in group.get_params(root) for o in (*p.opts, *p.secondary_opts)}}
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        found[name] = {o for p in command.get_params(root) if p.param_type_name == "option"
                       for o in (*p.opts, *p.secondary_opts)}
    return found


def _without_fences(text: str) -> str:
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"^\s*```bash\s*\n(.*?)^\s*```", text, flags=re.S | re.M)


def _command_lines(block: str) -> list[list[str]]:
    """The simple commands of a bash block: continuation lines joined, comments dropped, split at
    ``&&``, ``||``, ``;`` and ``|``, output redirections and environment assignments removed."""
    commands = []
    for line in re.sub(r"\\\n", " ", block).splitlines():
        words, current = shlex.split(line, comments=True), []
        for word in [*words, ";"]:
            if word in ("&&", "||", ";", "|", "&"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    cleaned = []
    for words in commands:
        if ">" in words:
            words = words[:words.index(">")]
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        if words:
            cleaned.append(words)
    return cleaned


def _ghostify_arguments(words: list[str]) -> list[str] | None:
    """What follows ``ghostify`` in a command line that runs it (directly, as ``python -m``, under
    ``accelerate launch``, or through ``scripts/quickstart.sh``), else None."""
    if words[0] == "ghostify":
        return words[1:]
    if "-m" in words and words[words.index("-m") + 1:words.index("-m") + 2] == ["ghostify"]:
        return words[words.index("-m") + 2:]
    if words[0] in ("bash", "sh") and words[1:2] == ["scripts/quickstart.sh"]:
        return ["run", *words[2:]]
    return None


def _problems_with(arguments: list[str], where: str) -> list[str]:
    cli = _cli()
    if not arguments:
        return []
    command = "" if arguments[0].startswith("-") else arguments[0]
    if command not in cli:
        return [f"{where}: no command `ghostify {command}`"]
    flags = [a.split("=", 1)[0] for a in arguments[1:] if re.match(r"^--?[A-Za-z]", a)]
    return [f"{where}: `ghostify {command}` has no option {flag}" for flag in flags if flag not in cli[command]]


def _script_problems(words: list[str], where: str) -> list[str]:
    """``python benchmarks/x.py --flag`` and ``bash scripts/x.sh``: the file exists, a flag is in its source."""
    script = next((w for w in words[1:] if w.endswith((".py", ".sh"))), None)
    if script is None or not script.startswith(("benchmarks/", "scripts/", ".ci/")):
        return []
    path = REPO / script
    if not path.is_file():
        return [f"{where}: {script} does not exist"]
    source = path.read_text()
    return [f"{where}: {script} takes no {flag}" for flag in words[words.index(script) + 1:]
            if flag.startswith("--") and flag.split("=")[0] not in source]


def test_every_documented_command_and_option_exists():
    problems = []
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(REPO))
        for block in _bash_blocks(text):
            for words in _command_lines(block):
                arguments = _ghostify_arguments(words)
                if arguments is not None:
                    problems += _problems_with(arguments, name)
                elif words[0] in ("python", "python3", "bash", "sh"):
                    problems += _script_problems(words, name)
                elif words[0] == "make":
                    targets = re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M)
                    problems += [f"{name}: no make target {t}" for t in words[1:] if "=" not in t and t not in targets]
        # inline code: `ghostify prune … --speedup X`, and `prune --speedup` where the command is named
        for span in re.findall(r"`([^`\n]+)`", _without_fences(text)):
            words = span.split()
            if words[0] == "ghostify" and len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]):
                command = words[1]
            elif words[0] in _cli() and words[0] and any(w.startswith("--") for w in words[1:]):
                command = words[0]
            elif words[0] in ("python", "bash") and len(words) > 1:
                problems += _script_problems(words, name)
                continue
            else:
                continue
            flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(words[1:]))
            problems += _problems_with([command, *flags], f"{name} (`{span}`)")
    assert not problems, "\n".join(sorted(set(problems)))


# ----- paths into run directories ----------------------------------------------------------------
def _documented_runs() -> dict[str, Path]:
    """Run directories the docs create with a recipe: ``-o DIR`` of ``ghostify run RECIPE`` (and of
    ``scripts/quickstart.sh``, ``runs/quick`` by default), plus ``RUN``, the docs' name for the quickstart's.
    A recipe the repository does not ship (``ghostify run recipe.yaml``: the reader's own) is named too."""
    runs = {"RUN": QUICKSTART, "runs/quick": QUICKSTART}
    for page in PAGES:
        for block in _bash_blocks(page.read_text()):
            for words in _command_lines(block):
                arguments = _ghostify_arguments(words) or []
                if arguments[:1] == ["run"] and "-o" in arguments:
                    recipe = QUICKSTART if words[0] in ("bash", "sh") else REPO / arguments[1]
                    runs[arguments[arguments.index("-o") + 1]] = recipe
    return runs


def _outputs() -> set[str]:
    """Every ``-o`` the docs' command lines write."""
    found = set()
    for page in PAGES:
        for block in _bash_blocks(page.read_text()):
            for words in _command_lines(block):
                found |= {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--output")}
    return found


def _named_paths(run: str) -> list[tuple[str, str, str]]:
    """(page, stage directory, the rest of the path) for every path into ``run`` the docs name."""
    pattern = re.compile(rf"(?<![\w/.-]){re.escape(run)}/([\w.-]+)((?:/[\w.-]+)*)")
    return [(str(page.relative_to(REPO)), stage, rest) for page in PAGES
            for stage, rest in pattern.findall(page.read_text())]


@cache
def _plan(recipe: Path) -> tuple[set[str], set[str]]:
    """The stage directories a recipe plans (run directory ``R``) and the paths inside it its stages read."""
    from ghostify import recipe as recipes

    planned = recipes.plan(recipes.load(recipe), "R")
    inside = {str(v)[2:] for p in planned for v in p.arguments.values() if isinstance(v, str) and v.startswith("R/")}
    return {p.label for p in planned}, inside


def test_every_documented_path_into_a_run_is_a_stage_the_recipe_plans(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the recipes name hub models; planning reads none of them
    runs, outputs, problems = _documented_runs(), _outputs(), []
    assert {"runs/quick", "runs/minilm"} <= set(runs)
    for run, recipe in runs.items():
        if not recipe.is_file():  # the reader's own recipe: nothing to check a stage against, so name none
            problems += [f"{page}: {run}/{first}{rest}: {recipe.name} is no recipe of this repository; name a "
                         "shipped one to show a path into its run" for page, first, rest in _named_paths(run)]
            continue
        stages, inside = _plan(recipe)
        for page, first, rest in _named_paths(run):
            path = f"{run}/{first}{rest}"
            if not re.match(r"^\d\d-", first):  # not a stage: then a documented command must write it
                if not any(path == o or path.startswith(o + "/") for o in outputs) and first not in (
                        "report.md", "report.json", "bench.json"):
                    problems.append(f"{page}: {path} is neither a stage of {recipe.name} nor written by a documented -o")
            elif first not in stages:
                problems.append(f"{page}: {path}: {recipe.name} has no stage {first} (its stages: {', '.join(sorted(stages))})")
            elif rest and f"{first}{rest}" not in inside and recipe != QUICKSTART:
                problems.append(f"{page}: {path}: no stage of {recipe.name} reads {first}{rest}")
    assert not problems, "\n".join(problems)


def test_the_quickstart_paths_the_docs_name_exist_after_a_run(quick_run):  # noqa: F811
    named = {f"{stage}{rest}" for run in ("runs/quick", "RUN") for _, stage, rest in _named_paths(run)
             if re.match(r"^\d\d-", stage)}
    assert "08-onnx/model_int8.onnx" in named and "06-final" in named
    missing = sorted(path for path in named if not (quick_run / path).exists())
    assert not missing, f"the docs name these, a quickstart run does not write them: {missing}"


# ----- times --------------------------------------------------------------------------------------
#: a run's duration: minutes, hours, m:ss, or seconds of a run ("in 3 min 45 s", "285 s of CPU")
_DURATION = re.compile(r"\b(?:few|in) (?:minutes|seconds)\b|\b\d+(?:[.,]\d+)?\s?(?:min|minutes|hours?)\b|\b\d+:\d\d\b(?!:)|\b\d[\d,]*\s?s\b(?! ?/)(?=[^|]*$)",
                       flags=re.M)
_MACHINE = re.compile(r"core|laptop|EPYC|Xeon|GPU|machine", flags=re.I)
_THREADS = re.compile(r"thread", flags=re.I)
_LOAD = re.compile(r"\bload\b|quiet|alone|busy|beside|shared", flags=re.I)


def test_every_time_in_the_docs_says_machine_threads_and_load():
    problems = []
    for page in PAGES:
        for paragraph in re.split(r"\n\s*\n", _without_fences(page.read_text())):
            if paragraph.lstrip().startswith("|"):  # a table: its caption paragraph states the conditions
                continue
            flat = " ".join(paragraph.split())
            if _DURATION.search(flat) and not (_MACHINE.search(flat) and _THREADS.search(flat) and _LOAD.search(flat)):
                problems.append(f"{page.relative_to(REPO)}: {flat[:160]}…")
    assert not problems, "each time needs its machine, threads and load (or goes):\n" + "\n".join(problems)
