"""Bad recipes and `--set` values: read within limits (size, nesting, aliases expanded, UTF-8, one
document that is a mapping, no repeated keys), each refused in one line that names the file (and
line) and the limit, quickly, with every input unchanged and nothing left at or beside -o."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ghostify.errors import GhostifyError
from ghostify.recipe.yaml_source import MAX_BYTES, MAX_DEPTH, RecipeSource, parse_value

from .test_bad_input import _check_refused, _fill, world  # noqa: F401

#: a 9-fold alias, 9 levels deep: 9**10 (3.5 billion) strings from about 500 bytes
BOMB = "\n".join(['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
                  *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10))])
BOMB_VALUE = "[" + ", ".join([f"&a0 [{', '.join(['1'] * 9)}]",
                              *(f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10))]) + "]"
GOOD = """\
model: {m}
data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}
vars: {{width: "0.5"}}
stages:
  - prune: {{width: "${{width}}"}}
"""

#: issue 48: a stage whose settings its step refuses, after a stage that would spend minutes (line 5: the bad one)
LATE = """\
model: {m}
data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}
stages:
  - finetune: {{epochs: 1, batch_size: 16, max_samples: 16}}
  - {stage}
"""
#: (file, the stage, what the one error line says after "FILE:5: ")
LATE_STAGES = [
    ("importance-samples", "importance: {samples: -1}", "importance: --samples -1 must be a whole number of at least 1"),
    ("importance-batch", "importance: {batch_size: 0}", "importance: --batch-size 0 must be a whole number of at least 1"),
    ("prune-criterion", "prune: {width: 0.5, criterion: hessian}",
     "prune: unknown --criterion 'hessian'; choose one of fisher, loss-gradient"),
    ("prune-speedup-one", "prune: {speedup: 1, latency: lat}", "prune: --speedup 1.0 must be a finite number above 1"),
    ("prune-speedup-and-width", "prune: {speedup: 2, width: 0.5, latency: lat}",
     "prune: --speedup and --width are mutually exclusive"),
    ("prune-width-missing", "prune: {allocation: global}", "prune: no width given"),
    ("prune-tune-masks-few", "prune: {width: 0.5, tune_masks: 5}", "prune: --tune-masks 5 is too few examples"),
    ("prune-width-zero", "prune: {width: 0}", "prune: --width 0.0 is outside (0, 1]"),
    ("drop-layers-criterion", "drop-layers: {keep: 1, criterion: hessian}", "drop-layers: unknown --criterion 'hessian'"),
    ("attach-ghost-even-kernel", "attach-ghost: {kernel_size: 4}", "attach-ghost: --kernel-size 4 is even"),
    ("distill-temperature", "distill: {teacher: '${model}', temperature: 0}", "distill: --temperature 0.0 must be positive"),
    ("finetune-learning-rate", "finetune: {learning_rate: -1, output: again}", "finetune: --learning-rate -1.0 must be positive"),
    ("eval-batch-size", "eval: {batch_size: 0}", "eval: --batch-size 0 must be a whole number of at least 1"),
    ("export-format", "export: {format: tflite}", "export: --format 'tflite' is not one of hf, onnx"),
    ("export-quantize-hf", "export: {quantize: int8}", "export: --quantize int8 quantises an exported graph; add --format onnx or --format openvino"),
    ("latency-rounds", "latency: {rounds: 0}", "latency: --rounds 0 must be a whole number of at least 1"),
    ("augment-replace-prob", "augment: {mlm: '${model}', replace_prob: 2}", "augment: --replace-prob 2.0 is outside (0, 1]"),
]
#: the data of the scores is too small for the mask tuning asked for: known from the importance stage's settings
TUNED = """\
model: {m}
data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}
stages:
  - importance: {{samples: 16}}
  - prune: {{width: 0.5, tune_masks: 256}}
"""


@pytest.fixture(scope="session")
def recipes_root(world, tmp_path_factory) -> Path:  # noqa: F811
    """The bad recipes, each a file of its own (a directory too)."""
    root = tmp_path_factory.mktemp("bad-recipes")
    good = GOOD.format(m=world / "m", toy=world / "toy")
    files = {
        "good.yaml": good,
        "bomb.yaml": BOMB + f"\nmodel: {world / 'm'}\nstages:\n  - prune: {{width: *a9}}\n",
        "deep.yaml": "model: " + "[" * 5000 + "]" * 5000 + "\n",
        "self-alias.yaml": "model: &a [1, *a]\nstages: []\n",
        "list.yaml": "- prune: {width: 0.5}\n",
        "scalar.yaml": "just some words\n",
        "empty.yaml": "",
        "comments.yaml": "# model: m\n# stages: []\n",
        "duplicate.yaml": good.replace("stages:", "model: /somewhere/else\nstages:"),
        "tabs.yaml": good.replace("  - prune", "\t- prune"),
        "control.yaml": good.replace("prune:", "prune\x01:"),
        "two-documents.yaml": good + "---\n" + good,
        "var-bomb.yaml": good.replace('{width: "0.5"}', "{big: [" + ", ".join(["12345"] * 2000) + "]}")
                             .replace('width: "${width}"', 'width: 0.5, output: "' + "${big}" * 200 + '"'),
    }
    for name, stage, _ in LATE_STAGES:
        files[f"late-{name}.yaml"] = LATE.format(m=world / "m", toy=world / "toy", stage=stage)
    files["tuned.yaml"] = TUNED.format(m=world / "m", toy=world / "toy")
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "lat").mkdir()  # a directory the prune stages' --latency names (its settings are refused before it is read)
    (root / "latin1.yaml").write_bytes(good.replace("sentence", "sentence-café").encode("latin-1"))
    (root / "large.yaml").write_text(good + "# " + "x" * MAX_BYTES + "\n")
    (root / "binary.yaml").write_bytes(bytes(range(256)) * 16)
    (root / "a-directory").mkdir()
    return root


R = ["run", "{r}/good.yaml", "-o", "{out}"]
CASES: list[tuple[str, list[str], str]] = [
    # the file itself
    ("alias-bomb", ["run", "{r}/bomb.yaml", "-o", "{out}"], "bomb.yaml:5: has more than 10,000 values once its aliases are expanded"),
    ("alias-to-itself", ["run", "{r}/self-alias.yaml", "-o", "{out}"], "self-alias.yaml:1: alias *a refers to itself"),
    ("deep-nesting", ["run", "{r}/deep.yaml", "-o", "{out}"], "deep.yaml:1: nests deeper than 100 levels"),
    ("latin-1-byte", ["run", "{r}/latin1.yaml", "-o", "{out}"], "latin1.yaml:2: byte 0xe9 at offset"),
    ("over-the-size-limit", ["run", "{r}/large.yaml", "-o", "{out}"], "larger than 1,048,576 bytes (1 MiB)"),
    ("binary-file", ["run", "{r}/binary.yaml", "-o", "{out}"], "binary.yaml holds a NUL byte at offset 0"),
    ("a-directory", ["run", "{r}/a-directory", "-o", "{out}"], "a-directory is a directory, not a YAML file"),
    ("a-list", ["run", "{r}/list.yaml", "-o", "{out}"], "list.yaml:1: a recipe is a mapping"),
    ("a-scalar", ["run", "{r}/scalar.yaml", "-o", "{out}"], "scalar.yaml:1: a recipe is a mapping"),
    ("empty-file", ["run", "{r}/empty.yaml", "-o", "{out}"], "empty.yaml is empty"),
    ("only-comments", ["run", "{r}/comments.yaml", "-o", "{out}"], "comments.yaml is empty"),
    ("duplicate-key", ["run", "{r}/duplicate.yaml", "-o", "{out}"], "duplicate.yaml:4: key 'model' appears twice in one mapping (lines 1 and 4)"),
    ("tab-indentation", ["run", "{r}/tabs.yaml", "-o", "{out}"],
     "tabs.yaml:5: invalid YAML: while scanning for the next token, found character '\\t' that cannot start any token "
     "(YAML indents with spaces, not tabs)"),
    ("control-character", ["run", "{r}/control.yaml", "-o", "{out}"], "control.yaml:5: invalid YAML: unacceptable character #x0001"),
    ("two-documents", ["run", "{r}/two-documents.yaml", "-o", "{out}"],
     "two-documents.yaml:6: invalid YAML: expected a single document in the stream, but found another document"),
    ("vars-bomb", ["run", "{r}/var-bomb.yaml", "-o", "{out}"], "var-bomb.yaml: ${vars} inside strings add more than 1,048,576"),
    # --set values: the same limits, and keys that go through a value that is no mapping
    ("set-into-a-path", [*R, "--set", "model.x=1"], "--set model.x: model is '"),
    ("set-into-a-string-var", [*R, "--set", "vars.width.x=1"], "--set vars.width.x: vars.width is '0.5', not a mapping"),
    ("set-into-a-stage-value", [*R, "--set", "prune.width.x=1"], "--set prune.width.x: prune.width is '${width}', not a mapping"),
    ("set-unparseable-value", [*R, "--set", "vars.w=[1/2"], "--set vars.w: invalid YAML: while parsing a flow sequence, expected ',' or ']'"),
    ("set-alias-bomb", [*R, "--set", "vars.w=" + BOMB_VALUE], "--set vars.w: has more than 10,000 values"),
    ("set-deep-value", [*R, "--set", "vars.w=" + "[" * 5000 + "]" * 5000], "--set vars.w: nests deeper than 100 levels"),
    ("set-duplicate-key", [*R, "--set", "vars.w={a: 1, a: 2}"], "--set vars.w: key 'a' appears twice"),
    ("set-empty-key-part", [*R, "--set", "vars..w=1"], "--set vars..w: an empty part in the key"),
    # issue 48: every stage's settings before the first stage runs (a finetune stage comes first), --dry-run too
    *[(f"late-{name}{dry}", ["run", f"{{r}}/late-{name}.yaml", "-o", "{out}", *flags], f"late-{name}.yaml:5: {expected}")
      for name, _, expected in LATE_STAGES for dry, flags in (("", []), ("-dry-run", ["--dry-run"]))],
    ("tune-masks-beyond-the-data", ["run", "{r}/tuned.yaml", "-o", "{out}"],
     "tuned.yaml:5: prune: --tune-masks 256 found 32 training example(s) in the scores' data; it needs at least two "
     "batches (one held out to check the scales): ask for --tune-masks 32"),
    ("tune-masks-beyond-the-data-dry-run", ["run", "{r}/tuned.yaml", "-o", "{out}", "--dry-run"],
     "tuned.yaml:5: prune: --tune-masks 256 found 32"),
]


def _fill_recipes(args: list[str], root: Path) -> list[str]:
    return [a.replace("{r}", str(root)) for a in args]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_recipe_is_one_line_quickly_and_changes_nothing(name, args, expected, world, recipes_root, tmp_path,  # noqa: F811
                                                            capsys):
    out = tmp_path / "out"
    started = time.monotonic()
    _check_refused(capsys, world, out, _fill(_fill_recipes(args, recipes_root), world, out), expected,
                   inputs=(recipes_root,))
    assert time.monotonic() - started < 10, "refused, but only after expanding what it refuses"


def test_there_are_enough_recipe_cases():
    assert len(CASES) >= 12


def test_the_good_recipe_of_the_table_is_accepted(world, recipes_root, tmp_path, capsys):  # noqa: F811
    """The cases fail for the reason they name: the recipe they start from is fine."""
    from .conftest import run_cli

    code, _, err = run_cli(capsys, "run", recipes_root / "good.yaml", "-o", tmp_path / "out", "--dry-run",
                           "--set", "vars.width=0.25", "--set", "vars.extra={a: [1, 2]}")
    assert code == 0, err


def test_anchors_merges_and_nesting_within_the_limits_load(tmp_path):
    """Aliases are refused only beyond the limit: a recipe that shares its settings through an
    anchor and merge keys loads as YAML says, and nesting of exactly the limit is fine."""
    path = tmp_path / "shared.yaml"
    path.write_text("defaults: &d {epochs: 1, batch_size: 8}\nmodel: m\nstages:\n"
                    "  - finetune: {<<: *d, epochs: 2}\n  - distill: *d\n")
    data = RecipeSource.read(path).data
    assert data["stages"] == [{"finetune": {"epochs": 2, "batch_size": 8}}, {"distill": {"epochs": 1, "batch_size": 8}}]
    assert parse_value("[" * MAX_DEPTH + "]" * MAX_DEPTH, "--set x") == _nested(MAX_DEPTH)
    with pytest.raises(GhostifyError, match="deeper than"):
        parse_value("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "--set x")
    wide = "[" + ", ".join(["[" + ", ".join(["1"] * 99) + "]"] * 99) + "]"  # 99 * 100 + 1 values: within
    assert len(parse_value(wide, "--set x")) == 99


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_tuned_prune_stage_within_its_data_is_accepted(world, recipes_root, tmp_path, capsys):  # noqa: F811
    """The tune_masks case fails for its reason: as many examples as the data has dry-run (a dry run prunes its
    random copy untuned: the sizes depend on the widths alone); and the message's advice is taken."""
    from .conftest import run_cli

    code, out, err = run_cli(capsys, "run", recipes_root / "tuned.yaml", "-o", tmp_path / "out", "--dry-run",
                             "--set", "prune.tune_masks=32")
    assert code == 0, err
    assert any(line.startswith("02-prune") and "tune_masks=32" in line for line in out.splitlines()), out
