"""`ghostify export` and every path read from inside a model directory: a model directory is
untrusted input, so what its files name (modules.json's module paths, auto_map code files, the
tokenizer and pooling files, the reference store) must lie inside it; a broken layout, a damaged
ONNX graph, an output name the file system cannot hold and a full TMPDIR are one line each. And
what must work: relative paths from another working directory, models with their own code."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ghostify import steps
from ghostify.checkpoint import load_model
from ghostify.export.hf import QUIET_TRANSFORMERS, WITHOUT_GHOSTIFY
from ghostify.export.onnx import example_batch, input_names
from ghostify.testing import tiny_checkpoint, tiny_sentence_transformer, write_toy_dataset

from .conftest import built_once, run_cli
from .test_bad_input import _beside, _check_refused, _fill, _snapshot, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _modules(path: Path, edit) -> None:
    modules = json.loads((path / "modules.json").read_text())
    edit(modules)
    (path / "modules.json").write_text(json.dumps(modules))


def _pooling(path: str) -> dict:
    return {"idx": 1, "name": "1", "path": path, "type": "sentence_transformers.models.Pooling"}


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> Path:
    """Models whose files name paths outside themselves, broken layouts, damaged ONNX graphs."""
    def build(root: Path) -> None:
        from .test_references import _save_with_references

        outside = root / "outside"  # what a model names outside itself
        st = tiny_sentence_transformer(root / "st")
        _copy(st / "1_Pooling", outside / "pool")
        shutil.copy2(st / "modules.json", outside / "modules.json")
        shutil.copy2(st / "tokenizer.json", outside / "tokenizer.json")

        # a module path "../payload": copying the layout would write beside the export
        up = _copy(st, root / "up" / "model")
        _copy(st / "1_Pooling", root / "up" / "payload")
        _modules(up, lambda m: m.__setitem__(1, _pooling("../payload")))
        _modules(_copy(st, root / "deep"), lambda m: m.__setitem__(1, _pooling("1_Pooling/../../../../../tmp")))
        _modules(_copy(st, root / "absolute"), lambda m: m.__setitem__(1, _pooling(str(outside / "pool"))))
        linked = _copy(st, root / "pool-linked")
        shutil.rmtree(linked / "1_Pooling")
        (linked / "1_Pooling").symlink_to(outside / "pool", target_is_directory=True)
        file_linked = _copy(st, root / "pool-file-linked")
        (file_linked / "1_Pooling" / "config.json").unlink()
        (file_linked / "1_Pooling" / "config.json").symlink_to(outside / "pool" / "config.json")
        modules_linked = _copy(st, root / "modules-linked")
        (modules_linked / "modules.json").unlink()
        (modules_linked / "modules.json").symlink_to(outside / "modules.json")
        (_copy(st, root / "modules-dict") / "modules.json").write_text(json.dumps({"0": _pooling("1_Pooling")}))
        (_copy(st, root / "modules-broken") / "modules.json").write_text("[{broken")
        (_copy(st, root / "no-pool-config") / "1_Pooling" / "config.json").unlink()
        # a custom module's code (as Jina v3 ships custom_st.py) that is a symlink out of the model
        custom = _copy(st, root / "custom-linked")
        _modules(custom, lambda m: m[0].__setitem__("type", "custom_st.Transformer"))
        (outside / "custom_st.py").write_text("Transformer = None\n")
        (custom / "custom_st.py").symlink_to(outside / "custom_st.py")

        m = tiny_checkpoint(root / "m")
        tok_linked = _copy(m, root / "tok-linked")
        (tok_linked / "tokenizer.json").unlink()
        (tok_linked / "tokenizer.json").symlink_to(outside / "tokenizer.json")
        tok_code = _copy(m, root / "tok-code")
        config = json.loads((tok_code / "tokenizer_config.json").read_text())
        config["auto_map"] = {"AutoTokenizer": ["../evil.Tokenizer", None]}
        (tok_code / "tokenizer_config.json").write_text(json.dumps(config))

        # RefBERT: a model with references, and one whose store is a symlink out of it
        _save_with_references(root / "refs")
        ref = root / "refs" / "ref"
        ref_linked = _copy(ref, root / "ref-linked")
        shutil.copy2(ref / "references.safetensors", outside / "references.safetensors")
        (ref_linked / "references.safetensors").unlink()
        (ref_linked / "references.safetensors").symlink_to(outside / "references.safetensors")

        # ONNX exports with a damaged graph
        onnx = root / "onnx"
        steps.export(m, onnx, format="onnx")
        graph = (onnx / "model.onnx").read_bytes()
        (_copy(onnx, root / "onnx-empty") / "model.onnx").write_bytes(b"")
        (_copy(onnx, root / "onnx-truncated") / "model.onnx").write_bytes(graph[: len(graph) // 3])
        noise = torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        (_copy(onnx, root / "onnx-random") / "model.onnx").write_bytes(noise.numpy().tobytes())
        write_toy_dataset(root / "toy", train=8, validation=8)
    return built_once(tmp_path_factory, "bad-export", build)


EVAL = ["--dataset", "<toy>", "--text-columns", "sentence", "--max-length", "16"]
BENCH = ["--rounds", "1", "--warmup", "0", "--seq-len", "8"]
LEAVES = "which leaves the model directory"
INT8 = ["--format", "onnx", "--quantize", "int8"]
CASES: list[tuple[str, list[str], str]] = [
    # paths that a model's files name, leaving the model
    ("modules-parent-path", ["export", "<up>/model", "-o", "{out}"], LEAVES),
    ("modules-parent-path-onnx", ["export", "<up>/model", "-o", "{out}", "--format", "onnx"], LEAVES),
    ("modules-deep-parent-path", ["export", "<deep>", "-o", "{out}"], LEAVES),
    ("modules-absolute-path", ["export", "<absolute>", "-o", "{out}"], LEAVES),
    ("pooling-dir-symlink-out", ["export", "<pool-linked>", "-o", "{out}"], "is a symlink to"),
    ("pooling-config-symlink-out", ["export", "<pool-file-linked>", "-o", "{out}"], "is a symlink to"),
    ("modules-json-symlink-out", ["export", "<modules-linked>", "-o", "{out}"], "is a symlink to"),
    ("custom-module-code-symlink-out", ["export", "<custom-linked>", "-o", "{out}"], "is a symlink to"),
    ("tokenizer-symlink-out", ["export", "<tok-linked>", "-o", "{out}"], "is a symlink to"),
    ("tokenizer-symlink-out-prune", ["prune", "<tok-linked>", "-o", "{out}", "--width", "0.5"], "is a symlink to"),
    ("tokenizer-auto-map-parent", ["export", "<tok-code>", "-o", "{out}"], "tokenizer_config.json auto_map"),
    ("reference-store-symlink-out", ["info", "<ref-linked>"], "references.file"),
    # sentence-transformers layouts that are broken
    ("modules-not-a-list", ["export", "<modules-dict>", "-o", "{out}"], "is not a list of modules"),
    ("modules-not-json", ["export", "<modules-broken>", "-o", "{out}", "--format", "onnx"], "cannot read"),
    ("pooling-config-missing", ["export", "<no-pool-config>", "-o", "{out}", "--format", "onnx"], "config.json is missing"),
    # what export cannot carry or read
    ("references-to-onnx", ["export", "<refs>/ref", "-o", "{out}", "--format", "onnx"], "RefBERT reference attention"),
    ("export-an-onnx-file", ["export", "<onnx>/model.onnx", "-o", "{out}"], "is an ONNX export"),
    ("export-an-onnx-dir", ["export", "<onnx>", "-o", "{out}", "--format", "onnx"], "is an ONNX export"),
    # damaged ONNX graphs
    ("onnx-empty-eval", ["eval", "<onnx-empty>/model.onnx", *EVAL], "is empty (0 bytes)"),
    ("onnx-truncated-eval", ["eval", "<onnx-truncated>", *EVAL], "cannot be loaded, it is truncated"),
    ("onnx-truncated-bench", ["bench", "<onnx-truncated>/model.onnx", *BENCH], "cannot be loaded, it is truncated"),
    ("onnx-random-bytes-bench", ["bench", "<onnx-random>", *BENCH], "cannot be loaded, it is truncated"),
    ("onnx-file-to-info", ["info", "<onnx-truncated>/model.onnx"], "which info cannot read"),
    # output names the file system cannot hold (255 bytes), with the temporary sibling's 14 more
    ("output-name-300", ["export", "{m}", "-o", "{out}/../" + "a" * 300], "longer than the 255"),
    ("output-name-300-prune", ["prune", "{m}", "-o", "{out}/../" + "a" * 300, "--width", "0.5"], "longer than the 255"),
    ("output-name-250", ["export", "{m}", "-o", "{out}/../" + "b" * 250], "temporary sibling"),
    # `--keep-fp32 ''` (an unset shell variable, say) names nothing: not the flag left out
    ("keep-fp32-empty", ["export", "{m}", "-o", "{out}", *INT8, "--keep-fp32", ""], "--keep-fp32 '' names an empty module"),
    ("keep-fp32-commas", ["export", "{m}", "-o", "{out}", *INT8, "--keep-fp32", " , "], "names an empty module"),
    ("keep-fp32-trailing-comma", ["export", "{m}", "-o", "{out}", *INT8, "--keep-fp32", "task-head,"],
     "--keep-fp32 'task-head,' names an empty module"),
]


def _fill_models(args: list[str], world: Path, models: Path, out: Path) -> list[str]:
    return _fill([arg.replace("<", str(models) + "/").replace(">", "") for arg in args], world, out)


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_export_and_model_paths_refuse_in_one_line(name, args, expected, world, models, tmp_path, capsys):
    out = tmp_path / "out"
    args = [str(Path(os.path.normpath(a))) if "/../" in a else a for a in _fill_models(args, world, models, out)]
    _check_refused(capsys, world, out, args, expected, inputs=(models,))


def test_there_are_enough_export_cases():
    assert len(CASES) >= 14


# ----------------------------------------------------------------------------------------------
# training.json and the history, read by export's model card and by info: a damaged one costs
# the card (or info) its metrics or that history line, said in one warning, not the command
# ----------------------------------------------------------------------------------------------
def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _edit_history(path: Path, edit) -> None:
    """``edit(history)`` in place, or the history replaced by ``edit`` when it is not a function."""
    def history(config):
        if callable(edit):
            edit(config["ghostify"]["history"])
        else:
            config["ghostify"]["history"] = edit

    _edit_json(path / "config.json", history)


def _set(key: str, value):
    """An edit of a mapping (or the first evaluation of training.json, for keys under "eval.")."""
    def edit(data):
        if key.startswith("eval."):
            data["evaluations"][0]["eval"][key[5:]] = value
        elif key == "eval":
            data["evaluations"][0]["eval"] = value
        else:
            data[key] = value
    return edit


@pytest.fixture(scope="session")
def trained(world, tmp_path_factory) -> Path:
    """A fine-tuned checkpoint (training.json, a history with a pruning and a fine-tuning step) and
    copies of it with training.json or the history damaged."""
    def build(root: Path) -> None:
        with pytest.warns(UserWarning):
            steps.prune(world / "m", root / "pruned", width="0.5")
        steps.finetune(root / "pruned", root / "good", dataset=str(world / "toy"), text_columns=("sentence",),
                       epochs=1, batch_size=16, max_length=16)
        training = {
            "eval-list": _set("eval", [0.5, 0.7]),  # issue 36, item 20
            "eval-null": _set("eval", None),
            "metric-string": _set("eval.accuracy", "0.9"),
            "evaluations-mapping": _set("evaluations", {"1": {"eval": {"accuracy": 0.5}}}),
            "best-step-text": _set("best_step", "last"),
            "baseline-list": _set("constant_baseline", [0.5]),
        }
        for name, edit in training.items():
            _edit_json(_copy(root / "good", root / f"training-{name}") / "training.json", edit)
        (_copy(root / "good", root / "training-not-json") / "training.json").write_text("{\"steps\": 3,")
        (_copy(root / "good", root / "training-a-list") / "training.json").write_text("[1, 2]")
        (_copy(root / "good", root / "training-latin1") / "training.json").write_bytes(b'{"note": "caf\xe9"}')
        (_copy(root / "good", root / "training-directory") / "training.json").unlink()
        (root / "training-directory" / "training.json").mkdir()
        histories = {
            "arguments-string": lambda h: h[0].__setitem__("arguments", "width=0.5"),  # issue 36, item 21
            "entry-number": lambda h: h.__setitem__(0, 3),
            "command-list": lambda h: h[1].__setitem__("command", ["finetune"]),
            "task-list": lambda h: h[1]["arguments"].__setitem__("task", ["sst2"]),
            "dataset-number": lambda h: h[1]["arguments"].__setitem__("dataset", 5),
            "time-number": lambda h: h[0].__setitem__("time", 1700000000),
            "two-damaged": lambda h: (h[0].__setitem__("arguments", None), h[1].__setitem__("command", None)),
        }
        for name, edit in histories.items():
            _edit_history(_copy(root / "good", root / f"history-{name}"), edit)
        _edit_history(_copy(root / "good", root / "history-a-string"), "prune then finetune")
        _edit_history(_copy(root / "good", root / "history-a-mapping"), {"0": {"command": "prune"}})
        (_copy(root / "good", root / "card-directory") / "README.md").unlink()
        (root / "card-directory" / "README.md").mkdir()
    return built_once(tmp_path_factory, "damaged-records", build)


def _check_warned(capsys, world: Path, out: Path, args: list[str], expected: str | None, *, inputs: tuple[Path, ...]):
    """The command succeeds with one `warning:` line containing ``expected`` (None: no warning),
    no error and no traceback, and every input is as it was."""
    roots = (world, *inputs)
    before = [_snapshot(r) for r in roots]
    code, stdout, stderr = run_cli(capsys, *args)
    warned = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert code == 0, stderr
    assert not [line for line in stderr.splitlines() if line.startswith("error:")], stderr
    assert "Traceback" not in stdout + stderr
    if expected is None:
        assert warned == [], stderr
    else:
        assert len(warned) == 1 and expected in warned[0], stderr
    assert [_snapshot(r) for r in roots] == before, "an input changed"
    return stdout


#: (id, the damaged checkpoint, what the one warning says; None: no warning)
DAMAGED_TRAINING = [
    ("eval-list", "evaluation 1 has no mapping of metrics under eval"),
    ("eval-null", "evaluation 1 has no mapping of metrics under eval"),
    ("metric-string", "metric accuracy of evaluation 1 is '0.9', not a number"),
    ("evaluations-mapping", "evaluations is a dict, not a list"),
    ("best-step-text", "best_step is 'last', not a step number"),
    ("baseline-list", "constant_baseline is not a mapping"),
    ("not-json", "it cannot be read as JSON"),
    ("a-list", "a JSON list, not an object"),
    ("latin1", "it cannot be read as JSON"),
    ("directory", "it cannot be read as JSON"),
]


@pytest.mark.parametrize(("name", "expected"), DAMAGED_TRAINING, ids=[c[0] for c in DAMAGED_TRAINING])
def test_a_damaged_training_json_costs_the_card_its_metrics_not_the_export(name, expected, world, trained, tmp_path,
                                                                           capsys, without_load_check):
    out = tmp_path / "out"
    source = trained / f"training-{name}"
    _check_warned(capsys, world, out, ["export", source, "-o", out], f"{source / 'training.json'} is damaged ({expected}",
                  inputs=(trained,))
    card = (out / "README.md").read_text()
    assert "## Evaluation" not in card and "model-index" not in card and "## Compression history" in card


def test_an_intact_training_json_gives_the_card_its_metrics(world, trained, tmp_path, capsys, without_load_check):
    out = tmp_path / "out"
    _check_warned(capsys, world, out, ["export", trained / "good", "-o", out], None, inputs=(trained,))
    assert "## Evaluation" in (out / "README.md").read_text()


#: (id, what the one warning says)
DAMAGED_HISTORY = [
    ("arguments-string", "history entry 1 of {source}/config.json is damaged (its arguments are a str, not a mapping)"),
    ("entry-number", "history entry 1 of {source}/config.json is damaged (an int, not a mapping)"),
    ("command-list", "history entry 2 of {source}/config.json is damaged (its command is ['finetune']"),
    ("task-list", "(its argument task is ['sst2'], not a string)"),
    ("dataset-number", "(its argument dataset is 5, not a string)"),
    ("time-number", "(its time is 1700000000, not a date)"),
    ("two-damaged", "history entry 1 of {source}/config.json is damaged (its arguments are a missing value, not a "
                    "mapping) (and 1 more entries)"),
    ("a-string", "the history in {source}/config.json is a str, not a list of steps"),
    ("a-mapping", "the history in {source}/config.json is a dict, not a list of steps"),
]


@pytest.mark.parametrize(("name", "expected"), DAMAGED_HISTORY, ids=[c[0] for c in DAMAGED_HISTORY])
@pytest.mark.parametrize("command", ["export", "info"])
def test_a_damaged_history_entry_costs_its_line_not_the_command(command, name, expected, world, trained, tmp_path,
                                                                 capsys, without_load_check):
    out = tmp_path / "out"
    source = trained / f"history-{name}"
    args = ["export", source, "-o", out] if command == "export" else ["info", source, "--json"]
    stdout = _check_warned(capsys, world, out, args, expected.format(source=source), inputs=(trained,))
    intact = json.loads((trained / "good" / "config.json").read_text())["ghostify"]["history"]
    damaged = json.loads((source / "config.json").read_text())["ghostify"]["history"]
    kept = [entry for entry in intact if isinstance(damaged, list) and entry in damaged]
    if command == "info":
        assert json.loads(stdout)["history"] == kept
    else:
        card = (out / "README.md").read_text()
        assert card.count("`ghostify prune`") == sum(e["command"] == "prune" for e in kept)
        assert card.count("`ghostify finetune`") == sum(e["command"] == "finetune" for e in kept)
        assert json.loads((out / "config.json").read_text())["ghostify"]["history"] == kept  # and in its record


def test_info_prints_a_history_with_a_damaged_entry_as_a_table(world, trained, capsys):
    code, out, err = run_cli(capsys, "info", trained / "history-arguments-string")
    assert code == 0 and "history: finetune" in out and "history: prune" not in out, err


def test_a_card_that_is_a_directory_does_not_stop_the_export(world, trained, tmp_path, capsys, without_load_check):
    """The input's README.md is never read: the export writes its own card."""
    out = tmp_path / "out"
    _check_warned(capsys, world, out, ["export", trained / "card-directory", "-o", out], None, inputs=(trained,))
    assert (out / "README.md").is_file()


def test_there_are_enough_record_cases():
    assert len(DAMAGED_TRAINING) + len(DAMAGED_HISTORY) >= 15


def test_a_full_tmpdir_during_the_check_blames_the_disk_not_the_model(world, tmp_path, capsys, monkeypatch):
    """The check without ghostify writes to TMPDIR; out of space there is not the model's fault."""
    import importlib

    export_step = importlib.import_module("ghostify.steps.export")  # the module: steps.export is the function

    def full(args, **kwargs):  # the check's process fails writing its copy of the model's code
        return subprocess.CompletedProcess(args, 1, "", "Traceback (most recent call last):\n"
                                           "OSError: [Errno 28] No space left on device: '/tmp/x/modules'")

    monkeypatch.setattr(export_step.subprocess, "run", full)
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(["export", "{pruned}", "-o", "{out}"], world, out), "TMPDIR")

    def no_room(obj, path, *args, **kwargs):  # the batches it compares cannot be saved
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(export_step.torch, "save", no_room)
    _check_refused(capsys, world, out, _fill(["export", "{pruned}", "-o", "{out}"], world, out), "TMPDIR")


# ----------------------------------------------------------------------------------------------
# what must work
# ----------------------------------------------------------------------------------------------
_LOAD = WITHOUT_GHOSTIFY + QUIET_TRANSFORMERS + textwrap.dedent("""
    import json
    import torch
    directory, io_path = sys.argv[1], sys.argv[2]
    data = torch.load(io_path)
    model = transformers.AutoModel.from_pretrained(directory, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    with torch.no_grad():
        got = model(**data["batch"]).last_hidden_state
    print(json.dumps({"worst": float((got - data["expected"]).abs().max()), "tokenizer": type(tokenizer).__name__}))
""")


def _loads_without_ghostify(source: Path, export: Path, tmp: Path) -> dict:
    """Load ``export`` where ghostify cannot be imported (``trust_remote_code=True``, as users do);
    its outputs' largest difference from ghostify's loading of ``source``, and its tokenizer's class."""
    net = load_model(source)
    batch = example_batch(net.config, input_names(net), 2, 7, seed=5)
    with torch.no_grad():
        expected = net.base_model(**batch).last_hidden_state
    torch.save({"batch": batch, "expected": expected}, tmp / "io.pt")
    env = {"PATH": "/usr/bin:/bin", "HF_MODULES_CACHE": str(tmp / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", _LOAD, str(export), str(tmp / "io.pt")], capture_output=True,
                            text=True, cwd=tmp, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # every day: tests/test_read_only_inputs.py exports from another directory
def test_relative_model_and_output_from_another_working_directory(tmp_path, capsys, monkeypatch):
    """The README's `ghostify export MODEL -o out`: the check without ghostify runs elsewhere."""
    work = tmp_path / "work"
    tiny_checkpoint(tmp_path / "dense", head="base")
    steps.prune(tmp_path / "dense", work / "rel" / "model", width=0.5)  # uneven: the export carries code
    monkeypatch.chdir(work)
    code, _, err = run_cli(capsys, "export", "rel/model", "-o", "out")
    assert code == 0, err
    assert (work / "out" / "modeling_ghostify.py").is_file()
    assert _loads_without_ghostify(work / "rel" / "model", work / "out", tmp_path)["worst"] <= 1e-5
    code, _, err = run_cli(capsys, "export", "rel/model", "-o", "onnx", "--format", "onnx")
    assert code == 0, err
    assert (work / "onnx" / "model.onnx").is_file()


TOKENIZER_CODE = "from transformers import BertTokenizerFast\n\n\nclass OwnTokenizer(BertTokenizerFast):\n    pass\n"
CONFIG_CODE = "from transformers import BertConfig\n\n\nclass OwnConfig(BertConfig):\n    model_type = 'bert'\n"
MODELING_CODE = ("from transformers import BertModel\n\nfrom .configuration_own import OwnConfig\n\n\n"
                 "class OwnModel(BertModel):\n    config_class = OwnConfig\n")


def _with_own_code(directory: Path) -> Path:
    """A checkpoint that ships its own code, as Jina v3 does: config.json's auto_map names
    configuration_own.py and modeling_own.py, tokenizer_config.json's names tokenization_own.py."""
    tiny_checkpoint(directory, head="base")
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_own.OwnConfig", "AutoModel": "modeling_own.OwnModel"}
    (directory / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((directory / "tokenizer_config.json").read_text())
    tokenizer["auto_map"] = {"AutoTokenizer": [None, "tokenization_own.OwnTokenizer"]}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (directory / "configuration_own.py").write_text(CONFIG_CODE)
    (directory / "modeling_own.py").write_text(MODELING_CODE)
    (directory / "tokenization_own.py").write_text(TOKENIZER_CODE)
    return directory


#: the everyday run keeps the pruned one (its Auto classes mapped to modeling_ghostify); an unpruned model's stock
#: export is checked every day by tests/test_export.py
@pytest.mark.parametrize("variant", [pytest.param("stock", marks=pytest.mark.slow), "code"])
def test_a_model_with_its_own_code_exports_and_loads_without_ghostify(variant, tmp_path, without_load_check):
    """ghostify builds such a model with transformers' own class, so the export maps the Auto
    classes to that (or to modeling_ghostify), never to the model's code it does not ship; the
    tokenizer's own code is still what loads the tokenizer, so it comes along. (The export's own check is left out:
    the test loads the export without ghostify itself, the tokenizer too.)"""
    source = _with_own_code(tmp_path / "own")
    if variant == "code":
        steps.prune(source, tmp_path / "pruned", width=0.5)
        source = tmp_path / "pruned"
    result = steps.export(source, tmp_path / "hf")
    assert result["stock"] == (variant == "stock")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert all(v.startswith("modeling_ghostify.") for v in config.get("auto_map", {}).values()), config.get("auto_map")
    assert (tmp_path / "hf" / "tokenization_own.py").is_file() and not (tmp_path / "hf" / "modeling_own.py").exists()
    loaded = _loads_without_ghostify(source, tmp_path / "hf", tmp_path)
    assert loaded["worst"] <= 1e-5 and loaded["tokenizer"] == "OwnTokenizer", loaded


def test_a_sentence_transformers_model_with_relative_module_paths_still_exports(tmp_path, without_load_check):
    st = tiny_sentence_transformer(tmp_path / "st")
    _modules(st, lambda m: m.__setitem__(1, _pooling("./1_Pooling")))  # relative, inside the model
    steps.prune(st, tmp_path / "pruned", width=0.5)
    result = steps.export(tmp_path / "pruned", tmp_path / "hf")
    assert result["sentence_transformers"] == str(st)
    assert (tmp_path / "hf" / "1_Pooling" / "config.json").is_file() and (tmp_path / "hf" / "2_Normalize").is_dir()
    result = steps.export(tmp_path / "pruned", tmp_path / "onnx", format="onnx")
    assert result["outputs"] == ["last_hidden_state", "sentence_embedding"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "onnx", "pruned", "st"]


def test_a_hugging_face_cache_snapshot_links_into_its_blobs(tmp_path, without_load_check):
    """The hub cache links every file of a snapshot to ../../blobs: that stays inside the model."""
    from ghostify.errors import GhostifyError
    from ghostify.files import path_inside

    repo = tmp_path / "models--org--name"
    snapshot = tiny_checkpoint(repo / "snapshots" / "abc123")
    (repo / "blobs").mkdir()
    os.replace(snapshot / "tokenizer.json", repo / "blobs" / "f00d")
    (snapshot / "tokenizer.json").symlink_to("../../blobs/f00d")
    assert path_inside(snapshot, "tokenizer.json", "tokenizer.json") == snapshot / "tokenizer.json"
    steps.export(snapshot, tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").is_file() and not (tmp_path / "hf" / "tokenizer.json").is_symlink()
    (repo / "elsewhere").mkdir()
    (snapshot / "vocab.txt").symlink_to(repo / "elsewhere")
    with pytest.raises(GhostifyError, match="is a symlink to"):
        path_inside(snapshot, "vocab.txt", "vocab.txt")


def test_the_history_names_local_inputs_absolutely(tmp_path, capsys, monkeypatch, without_load_check):
    """A chain run with relative paths in one directory exports from another with the
    sentence-transformers layout: the history records where the origin is, not how it was named."""
    tiny_sentence_transformer(tmp_path / "runs" / "st")
    monkeypatch.chdir(tmp_path / "runs")
    code, _, err = run_cli(capsys, "prune", "st", "-o", "pruned", "--width", "0.5")
    assert code == 0, err
    history = load_model(tmp_path / "runs" / "pruned").config.ghostify["history"]
    assert history[-1]["arguments"]["model"] == str(tmp_path / "runs" / "st")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, _, err = run_cli(capsys, "export", "../runs/pruned", "-o", "hf")
    assert code == 0, err
    assert (elsewhere / "hf" / "modules.json").is_file() and (elsewhere / "hf" / "1_Pooling" / "config.json").is_file()
