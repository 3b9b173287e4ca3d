"""Recipes: every shipped one validates and runs on a tiny model; broken ones report every problem
with its line; `run` skips completed stages and resumes an interrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ghostify import load_model
from ghostify import recipe as recipes
from ghostify.data import resolve_task
from ghostify.recipe import RecipeError
from ghostify.testing import (
    tiny_checkpoint,
    tiny_model,
    tiny_sentence_transformer,
    tiny_tokenizer,
    write_toy_dataset,
    write_toy_ner_dataset,
    write_toy_pairs,
    write_toy_sentences,
    write_toy_squad_dataset,
)

from .conftest import REPO, every_day_params, run_cli

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    tiny_checkpoint(root / "model")
    tiny_checkpoint(root / "model-regression", num_labels=1)
    mlm = tiny_model("bert", "masked-lm")
    mlm.save_pretrained(root / "mlm")
    tiny_tokenizer(root / "mlm")
    write_toy_dataset(root / "toy", train=64, validation=32)
    write_toy_dataset(root / "toyreg", train=64, validation=32, regression=True)
    write_toy_ner_dataset(root / "ner", train=48, validation=16)
    write_toy_squad_dataset(root / "squad", train=32, validation=8)
    tiny_sentence_transformer(root / "st")
    write_toy_sentences(root / "sentences.txt", count=48)
    write_toy_pairs(root / "pairs", train=16, validation=24)
    return root


def test_there_are_recipes_for_every_glue_task_and_the_baseline():
    names = {p.stem for p in RECIPES}
    for task in ("sst2", "mrpc", "rte", "stsb", "cola", "qnli", "qqp", "mnli", "wnli"):
        assert f"ghostbert-{task}" in names and f"pruned-baseline-{task}" in names
    assert "quickstart" in names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_validates(path):
    recipe = recipes.load(path)
    assert recipe.stages and recipe.header.model


def _tiny_overrides(tiny: Path, path: Path) -> list[str]:
    data = yaml.safe_load(path.read_text())["data"]  # a task preset, or the columns of a dataset without one
    kind = resolve_task(data.get("task"), text_columns=tuple(data.get("text_columns") or ()) or None).kind
    if kind != "classification":
        return _other_kind_overrides(tiny, path, kind)
    regression = "stsb" in path.stem
    data = tiny / ("toyreg" if regression else "toy")
    model = tiny / ("model-regression" if regression else "model")
    overrides = [f"model={model}", f"data.dataset={data}", "data.task=null", "data.text_columns=[sentence]",
                 "data.label_column=label", "data.max_length=32"]
    raw = yaml.safe_load(path.read_text())
    commands = {next(iter(stage)) for stage in raw["stages"]}
    for command, settings in {
        "finetune": ["max_samples=32", "epochs=1", "batch_size=16"],
        "distill": ["max_samples=32", "epochs=1", "batch_size=16"],
        "importance": ["samples=16"],
        "group-linear": ["groups=2", "modules=qkv"],  # the tiny FFN width (37) is prime
        "augment": [f"mlm={tiny / 'mlm'}", "max_samples=8", "per_example=2"],
        "factorize-embeddings": ["rank=8"],  # the tiny model's embeddings are 32 wide
        "share-layers": ["groups=1"],  # the tiny model has 2 layers
        "latency": ["rounds=3", "warmup=1"],
    }.items():
        if command in commands:
            overrides += [f"{command}.{s}" for s in settings]
    if "speedup" in (raw.get("vars") or {}):
        overrides.append("vars.speedup=1.1")  # a tiny model's layers are a small part of its time: 2x is out of reach
    return overrides


def _other_kind_overrides(tiny: Path, path: Path, kind: str) -> list[str]:
    """A tiny model and toy data of the recipe's task kind, and short training."""
    common = ["data.task=null", "data.max_length=32"]
    short = [f"{c}.{s}" for c in ("finetune", "distill") for s in ("max_samples=32", "epochs=1", "batch_size=16")]
    if kind == "tokens":
        return [f"model={tiny / 'model'}", f"data.dataset={tiny / 'ner'}", "data.tokens_column=tokens",
                "data.tags_column=ner_tags", *common, *short, "importance.samples=16"]
    if kind == "qa":
        return [f"model={tiny / 'model'}", f"data.dataset={tiny / 'squad'}", "data.question_column=question",
                "data.doc_stride=8", *common, *short, "importance.samples=16"]
    return [f"model={tiny / 'st'}", f"teacher={tiny / 'st'}", f"data.dataset={tiny / 'sentences.txt'}",
            "data.text_columns=[text]", "data.task=embeddings", "data.max_length=32", "importance.samples=16",
            "distill.max_samples=32", "distill.epochs=1", "distill.batch_size=16", f"eval.dataset={tiny / 'pairs'}",
            "eval.text_columns=[sentence1,sentence2]"]


#: the recipes that run every day: one per kind of task (the others' methods run every day in their own tests, the
#: GLUE variants of ghostbert/pruned-baseline are one recipe with another task, compress's stages are the compress
#: command's, test_compress*); every recipe validates every day (above), and runs in the full suite
EVERY_DAY_RECIPES = {"quickstart", "embeddings-minilm", "ner-conll2003", "squad"}


@pytest.mark.parametrize("path", every_day_params(RECIPES, {p for p in RECIPES if p.stem in EVERY_DAY_RECIPES}),
                         ids=lambda p: p.stem)
def test_every_shipped_recipe_runs_on_a_tiny_model(path, tiny, tmp_path):
    recipe = recipes.load(path, _tiny_overrides(tiny, path))
    report = recipes.run(recipe, tmp_path / "run")
    assert [row["status"] for row in report["stages"]] == ["ran"] * len(recipe.stages)
    evaluations = [row for row in report["stages"] if row["command"] == "eval"]
    assert evaluations and evaluations[-1]["metrics"]  # every recipe ends by measuring its model
    assert (tmp_path / "run" / "report.md").is_file()


def test_dry_run_reports_size_after_structural_stages(tiny, capsys, tmp_path):
    path = REPO / "recipes" / "ghostbert-sst2.yaml"
    code, out, err = run_cli(capsys, "run", path, "-o", tmp_path / "plan", "--dry-run", "--json",
                             *[x for o in _tiny_overrides(tiny, path) for x in ("--set", o)])
    assert code == 0, err
    rows = json.loads(out)["plan"]
    by_command = {row["command"]: row for row in rows}
    assert by_command["prune"]["params"] < rows[0]["params"]
    assert by_command["attach-ghost"]["params"] == by_command["prune"]["params"] + 2 * 2 * 32 * 3  # 2·L·d·k
    assert not (tmp_path / "plan").exists()  # nothing ran


BROKEN = """\
model: some/model
data:
  task: sst2
  datset: typo
stages:
  - distill:
      epochs: three
  - prune:
      widht: 0.5
  - finetune:
      output: teacher
  - squeeze: {}
  - eval:
      model: ${later}
  - finetune:
      output: later
"""


def test_a_broken_recipe_reports_all_its_errors_with_lines(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    with pytest.raises(RecipeError) as caught:
        recipes.load(path)
    problems = caught.value.problems
    expected = [(4, "unknown key 'datset'"), (7, "epochs"), (9, "unknown key 'widht' (did you mean 'width'?)"),
                (12, "unknown stage 'squeeze'"), (6, "distill needs a teacher"), (14, "a later stage")]
    for line, text in expected:
        assert any(p.startswith(f"{path}:{line}:") and text in p for p in problems), (line, text, problems)
    assert len(problems) == len(expected)
    code, _, err = run_cli(capsys, "run", path, "-o", tmp_path / "out")
    assert code == 2 and len(err.strip().splitlines()) == len(expected) and "Traceback" not in err


def test_an_unknown_key_names_the_key_meant_or_where_the_keys_are_listed(tmp_path):
    """Issue 39: a typo got its suggestion, then all 41 keys of the stage on one line."""
    path = tmp_path / "typos.yaml"
    path.write_text("model: m\nseeed: 1\ndata: {dataset: d, zzz: 1}\nstages:\n"
                    "  - finetune: {learnig_rate: 0.001}\n  - finetune: {output: second, qqq: 1}\n")
    with pytest.raises(RecipeError) as caught:
        recipes.load(path)
    problems = caught.value.problems
    typo = next(p for p in problems if "'learnig_rate'" in p)
    assert typo.endswith("unknown key 'learnig_rate' (did you mean 'learning_rate'?)"), typo
    assert next(p for p in problems if "'seeed'" in p).endswith("(did you mean 'seed'?)")
    unknown = next(p for p in problems if "'qqq'" in p)
    assert unknown.endswith("the keys here are the options of `ghostify finetune --help`, with _ for -"), unknown
    data = next(p for p in problems if "'zzz'" in p)
    assert "`ghostify finetune --help` (its data and task options)" in data and "max_length" not in data
    assert all(len(p.split(": ", 1)[1]) < 150 for p in problems), problems  # after the file:line


def test_set_overrides_and_their_errors(tmp_path):
    path = REPO / "recipes" / "quickstart.yaml"
    recipe = recipes.load(path, ["vars.width=3/12", "finetune.epochs=2", "stages.1.samples=64", "data.task=mrpc"])
    prune = next(s for s in recipe.stages if s.command.name == "prune")
    assert prune.settings["width"] == "3/12"
    assert [s.settings["epochs"] for s in recipe.stages if s.command.name == "finetune"] == [2, 2]
    assert recipe.stages[1].settings["samples"] == 64 and recipe.stages[0].settings["task"] == "mrpc"
    with pytest.raises(RecipeError, match="no stage is named or runs 'squeeze'"):
        recipes.load(path, ["squeeze.epochs=1"])
    with pytest.raises(RecipeError, match="KEY=VALUE"):
        recipes.load(path, ["epochs"])


OPTIONAL_GHOSTS = """
model: MODEL
vars:
  ghosts: false
data: {dataset: DATA, text_columns: [sentence], label_column: label, max_length: 32}
stages:
  - importance: {samples: 16}
  - prune: {width: 0.5}
  - attach-ghost: {when: "${ghosts}", kernel_size: 5}
  - eval: {}
"""


def test_when_false_leaves_a_stage_out_and_the_others_keep_their_numbers(tiny, tmp_path):
    path = tmp_path / "optional.yaml"
    path.write_text(OPTIONAL_GHOSTS.replace("MODEL", str(tiny / "model")).replace("DATA", str(tiny / "toy")))
    plain = recipes.load(path)
    assert [(s.index, s.command.name) for s in plain.stages] == [(0, "importance"), (1, "prune"), (3, "eval")]
    recipes.run(plain, tmp_path / "plain")
    assert sorted(p.name for p in (tmp_path / "plain").iterdir() if p.is_dir()) == ["01-importance", "02-prune", "04-eval"]
    assert not load_model(tmp_path / "plain" / "02-prune").config.ghostify["methods"].get("ghost")

    ghosts = recipes.load(path, ["vars.ghosts=true"])
    assert [s.command.name for s in ghosts.stages] == ["importance", "prune", "attach-ghost", "eval"]
    recipes.run(ghosts, tmp_path / "ghosts")
    record = load_model(tmp_path / "ghosts" / "03-attach-ghost").config.ghostify["methods"]["ghost"]
    assert record["settings"]["kernel_size"] == 5
    with pytest.raises(RecipeError, match="when"):
        recipes.load(path, ["vars.ghosts=sometimes"])


def test_invalid_yaml_is_one_line_with_its_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: x\nstages:\n  - prune: {width: [\n")
    with pytest.raises(Exception, match=r"bad.yaml:\d+: invalid YAML"):
        recipes.load(path)


@pytest.mark.real
def test_quickstart_runs_end_to_end_on_minilm(minilm, glue, tmp_path, capsys):
    args = ["run", REPO / "recipes" / "quickstart.yaml", "-o", tmp_path / "quick", "--json",
            "--set", f"model={minilm}", "--set", f"data.dataset={glue}", "--set", "vars.samples=256",
            "--set", "importance.samples=64"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    report = json.loads(out)
    assert [row["stage"] for row in report["stages"]][-3:] == ["07-eval", "08-onnx", "09-eval-int8"]
    rows = {row["stage"]: row for row in report["stages"]}
    final = rows["07-eval"]["metrics"]["accuracy"]
    assert 0 <= final <= 1
    assert abs(rows["09-eval-int8"]["metrics"]["accuracy"] - final) <= 0.05  # the shipped int8 graph
    sizes = {row["stage"]: row["params"] for row in report["stages"] if row["params"]}
    assert sizes["03-prune"] < sizes["01-teacher"]
    checkpoint = tmp_path / "quick" / "06-final"
    history = [h["command"] for h in load_model(checkpoint).config.ghostify["history"]]
    assert history == ["finetune", "importance", "prune", "distill", "finetune"]  # ghosts: off by default
    again = recipes.load(checkpoint / "recipe.yaml")  # the final checkpoint reproduces itself
    assert again.header.model == str(minilm)
    code, out, _ = run_cli(capsys, *args)  # everything is done: every stage is skipped
    assert code == 0 and {row["status"] for row in json.loads(out)["stages"]} == {"skipped"}
    code, _, err = run_cli(capsys, "report", tmp_path / "quick", "--plot", tmp_path / "fig.png")
    assert code == 0, err
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"


KILLABLE = """\
model: {model}
teacher: ${{teacher}}
data: {{dataset: {data}, text_columns: [sentence], label_column: label, max_length: 32}}
seed: 3
stages:
  - finetune: {{output: teacher, epochs: 2, batch_size: 16, learning_rate: 3.0e-3}}
  - prune: {{width: 0.5}}
  - attach-ghost: {{}}
  - distill: {{epochs: 2, batch_size: 8, learning_rate: 1.0e-3, checkpoint_steps: 2, max_samples: 128}}
  - finetune: {{output: final, epochs: 1, batch_size: 16, learning_rate: 1.0e-3}}
"""


@pytest.mark.slow  # the full run (a resumed staged run equals an uninterrupted one daily in test_compress_stages)
def test_killed_run_skips_completed_stages_resumes_and_equals_an_uninterrupted_one(tmp_path):
    data = write_toy_dataset(tmp_path / "toy", train=128, validation=32)
    tiny_checkpoint(tmp_path / "model")
    path = tmp_path / "recipe.yaml"
    path.write_text(KILLABLE.format(model=tmp_path / "model", data=data))
    command = [sys.executable, "-m", "ghostify", "run", str(path)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([*command, "-o", str(tmp_path / "whole")], check=True, env=env, capture_output=True, timeout=600)

    run_dir = tmp_path / "killed"
    process = subprocess.Popen([*command, "-o", str(run_dir)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    state = run_dir / "04-distill.partial" / "state" / "progress.json"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if state.is_file() and json.loads(state.read_text())["step"] >= 5:
            break
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (run_dir / "04-distill" / "stage.json").exists(), "the distill stage finished before the kill"

    finished = subprocess.run([*command, "-o", str(run_dir), "--json"], env=env, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    status = {row["stage"]: row["status"] for row in json.loads(finished.stdout)["stages"]}
    assert status == {"01-teacher": "skipped", "02-prune": "skipped", "03-attach-ghost": "skipped",
                      "04-distill": "ran", "05-final": "ran"}
    for stage in ("04-distill", "05-final"):
        whole = load_model(tmp_path / "whole" / stage).state_dict()
        resumed = load_model(run_dir / stage).state_dict()
        assert all(torch.equal(whole[k], resumed[k]) for k in whole), stage
