"""Bad input, table-driven: every mistake a careless user (or a broken machine) makes is one
`error:` line with a non-zero exit, no traceback, every input byte-identical, and nothing left at
or beside the output. Plus: signals clean up like Ctrl-C, outputs honour the umask, results go to
stdout, help texts keep their `<...>`, and one rule says whether labels are a regression."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ghostify.methods.pruning import ImportanceScores
from ghostify.testing import TOY_WORDS, tiny_checkpoint, tiny_model, tiny_tokenizer, write_toy_dataset

from .conftest import REPO, built_once, run_cli


# ----------------------------------------------------------------------------------------------
# the inputs: tiny checkpoints, good and broken, built once
# ----------------------------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_record(path: Path, edit) -> None:
    config = json.loads((path / "config.json").read_text())
    edit(config["ghostify"])
    (path / "config.json").write_text(json.dumps(config))


def _edit_weights(path: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(path / "model.safetensors"))
    edit(state)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})


RECIPE = """\
model: {m}
data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}
stages:
  - prune: {{width: 0.5}}
  - attach-ghost: {{}}
"""
RECIPE_TRAINS = """\
model: {m}
data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}
stages:
  - finetune: {{epochs: 1, batch_size: 16, max_samples: 16}}
"""


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> Path:
    """Checkpoints, data and recipes of every kind the bad-input tables name, built once per run."""
    return built_once(tmp_path_factory, "bad-input", _build_world)


def _build_world(root: Path) -> None:
    from ghostify.steps import attach_ghost, prune

    m = tiny_checkpoint(root / "m")
    toy = write_toy_dataset(root / "toy", train=32, validation=16)
    mlm = tiny_model("bert", "masked-lm")
    mlm.save_pretrained(root / "mlm")
    tiny_tokenizer(root / "mlm")
    # a checkpoint whose tokenizer has another vocabulary (a RoBERTa teacher for a BERT student, say)
    other = _copy(m, root / "other")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (other / name).unlink()
    from transformers import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *reversed(TOY_WORDS), "great", "extra"]
    BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(str(other))
    # scores as `ghostify importance` writes them
    scored = _copy(m, root / "scored")
    ImportanceScores(heads=[torch.rand(4), torch.rand(4)], ffn=[torch.rand(37), torch.rand(37)]).save(
        scored / "importance.safetensors")
    with pytest.warns(UserWarning):
        prune(m, root / "pruned", width="0.5")
    attach_ghost(root / "pruned", root / "ghost")

    # broken plain checkpoints (no record)
    (_copy(m, root / "badconfig") / "config.json").write_text("{broken")
    (_copy(m, root / "empty") / "model.safetensors").write_bytes(b"")
    weights = (m / "model.safetensors").read_bytes()
    (_copy(m, root / "truncated") / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (_copy(m, root / "noweights") / "model.safetensors").unlink()
    _edit_weights(_copy(m, root / "missing-tensor"), lambda s: s.pop("bert.encoder.layer.0.attention.self.query.weight"))
    _edit_weights(_copy(m, root / "extra-tensor"), lambda s: s.__setitem__("bert.encoder.layer.9.output.dense.weight", torch.zeros(2)))
    _edit_weights(_copy(m, root / "bad-shape"),
                  lambda s: s.__setitem__("bert.encoder.layer.1.intermediate.dense.weight", torch.zeros(5, 32)))
    pickle = _copy(m, root / "pickle")
    import argparse

    from safetensors.torch import load_file

    state = load_file(str(pickle / "model.safetensors"))
    state["config"] = argparse.Namespace(evil=True)  # not a tensor: torch refuses to unpickle it safely
    (pickle / "model.safetensors").unlink()
    torch.save(state, pickle / "pytorch_model.bin")

    # tampered records
    _edit_record(_copy(root / "pruned", root / "head99"), lambda r: r["heads"][0].__setitem__(0, 99))
    _edit_record(_copy(root / "pruned", root / "head-twice"), lambda r: r["heads"][0].__setitem__(1, r["heads"][0][0]))
    _edit_record(_copy(root / "pruned", root / "ffn-negative"), lambda r: r["ffn"].__setitem__(0, -5))
    _edit_record(_copy(root / "pruned", root / "ffn-grown"), lambda r: r["ffn"].__setitem__(1, 999))
    _edit_record(_copy(root / "pruned", root / "layers"), lambda r: (r["heads"].append([0]), r["ffn"].append(3)))
    _edit_record(_copy(root / "ghost", root / "ghost-kernel"), lambda r: r["methods"]["ghost"]["settings"].__setitem__("kernel_size", 1025))
    _edit_record(_copy(root / "pruned", root / "store-elsewhere"), lambda r: r["methods"].__setitem__("references", {"file": "/etc/passwd"}))

    (root / "r.yaml").write_text(RECIPE.format(m=m, toy=toy))
    (root / "r-train.yaml").write_text(RECIPE_TRAINS.format(m=m, toy=toy))
    (root / "r-typo.yaml").write_text(RECIPE.format(m=m, toy=toy).replace("width:", "widht:"))
    _copy(m, root / "runs" / "01-prune")  # a stage directory of an earlier run


# ----------------------------------------------------------------------------------------------
# the table: (id, arguments, what the error line says); {name} is a path in the world, {out} the
# output of the case (a fresh path), {world} the world's root
# ----------------------------------------------------------------------------------------------
TRAIN = ["--dataset", "{toy}", "--text-columns", "sentence", "--max-length", "32"]
CASES: list[tuple[str, list[str], str]] = [
    # missing or wrong paths
    ("missing-model", ["prune", "./does-not-exist", "-o", "{out}", "--width", "0.5"], "does not exist"),
    ("model-is-a-file", ["prune", "{m}/config.json", "-o", "{out}", "--width", "0.5"], "is a file, not a checkpoint directory"),
    ("model-without-config", ["prune", "{toy}", "-o", "{out}", "--width", "0.5"], "no config.json"),
    ("corrupt-config", ["info", "{badconfig}"], "corrupt config.json"),
    ("missing-recipe", ["run", "{world}/nope.yaml", "-o", "{out}"], "does not exist"),
    ("missing-scores", ["prune", "{m}", "-o", "{out}", "--width", "0.5", "--importance", "{world}/nope.safetensors"], "does not exist"),
    ("unknown-command", ["squeeze", "{m}"], "No such command"),
    # broken checkpoints: plain ones are checked as strictly as ghostify's own
    ("empty-weights", ["prune", "{empty}", "-o", "{out}", "--width", "0.5"], "empty (0 bytes)"),
    ("truncated-weights", ["prune", "{truncated}", "-o", "{out}", "--width", "0.5"], "truncated or damaged"),
    ("no-weights", ["info", "{noweights}"], "re-create or re-download"),
    ("missing-tensor", ["prune", "{missing-tensor}", "-o", "{out}", "--width", "0.5"], "missing ['bert.encoder.layer.0.attention.self.query.weight']"),
    ("unexpected-tensor", ["prune", "{extra-tensor}", "-o", "{out}", "--width", "0.5"], "unexpected ['bert.encoder.layer.9"),
    ("mis-shaped-tensor", ["attach-ghost", "{bad-shape}", "-o", "{out}"], "intermediate.dense.weight has shape (5, 32)"),
    ("unsafe-pickle", ["prune", "{pickle}", "-o", "{out}", "--width", "0.5"], "safe_serialization=True"),
    ("record-head-99", ["prune", "{head99}", "-o", "{out}", "--width", "0.5"], "heads[0] = 99"),
    ("record-head-twice", ["info", "{head-twice}"], "lists a head twice"),
    ("record-ffn-negative", ["attach-ghost", "{ffn-negative}", "-o", "{out}"], "ffn[0] = -5"),
    ("record-ffn-grown", ["info", "{ffn-grown}"], "ffn[1] = 999"),
    ("record-layers", ["info", "{layers}"], "config builds 2 distinct layers"),
    ("record-ghost-kernel", ["info", "{ghost-kernel}"], "--kernel-size 1025 exceeds"),
    ("record-store-elsewhere", ["info", "{store-elsewhere}"], "references.file"),
    # outputs that would overwrite or delete an input (even with --overwrite)
    ("out-is-model", ["prune", "{m}", "-o", "{m}", "--width", "0.5", "--overwrite"], "is the input"),
    ("out-inside-model", ["attach-ghost", "{m}", "-o", "{m}/ghost"], "lies inside the input"),
    ("out-contains-model", ["prune", "{m}", "-o", "{world}", "--width", "0.5", "--overwrite"], "contains the input"),
    ("out-holds-scores", ["prune", "{m}", "-o", "{scored}", "--width", "0.5", "--importance",
                          "{scored}/importance.safetensors", "--overwrite"], "contains the input --importance"),
    ("out-inside-scores", ["prune", "{m}", "-o", "{scored}/p", "--width", "0.5", "--importance", "{scored}"], "inside the input --importance"),
    ("out-inside-dataset", ["importance", "{m}", "-o", "{toy}/scores", *TRAIN, "--samples", "4"], "input --dataset"),
    ("out-is-dataset", ["finetune", "{m}", "-o", "{toy}", *TRAIN, "--overwrite"], "is the input --dataset"),
    ("out-inside-teacher", ["distill", "--teacher", "{m}", "--student", "{pruned}", "-o", "{m}/d", *TRAIN], "input --teacher"),
    ("out-inside-finetune-teacher", ["finetune", "{pruned}", "--teacher", "{scored}", "-o", "{scored}/t", *TRAIN], "input --teacher"),
    ("out-inside-augment-data", ["augment", "--mlm", "{mlm}", "-o", "{toy}/aug", *TRAIN], "input --dataset"),
    ("out-inside-label-model", ["augment", "--mlm", "{mlm}", "--label-with", "{m}", "-o", "{m}/aug", *TRAIN], "input --label-with"),
    ("out-exists", ["attach-ghost", "{m}", "-o", "{ghost}"], "already exists"),
    ("out-is-a-file", ["prune", "{m}", "-o", "{world}/r.yaml", "--width", "0.5", "--overwrite"], "is a file"),
    ("out-under-a-file", ["prune", "{m}", "-o", "{world}/r.yaml/x", "--width", "0.5"], "is a file, not a directory"),
    # settings no one can mean
    ("width-zero", ["prune", "{m}", "-o", "{out}", "--width", "0"], "outside (0, 1]"),
    ("width-above-one", ["prune", "{m}", "-o", "{out}", "--width", "1.5"], "outside (0, 1]"),
    ("width-missing", ["prune", "{m}", "-o", "{out}"], "no width given"),
    ("width-no-head", ["prune", "{m}", "-o", "{out}", "--width", "1/8"], "keeps no head"),
    ("kernel-zero", ["attach-ghost", "{m}", "-o", "{out}", "--kernel-size", "0"], "not a positive integer"),
    ("kernel-even", ["attach-ghost", "{m}", "-o", "{out}", "--kernel-size", "4"], "is even"),
    ("kernel-huge", ["attach-ghost", "{m}", "-o", "{out}", "--kernel-size", "1025"], "exceeds the model's 160 positions"),
    ("features-huge", ["attach-ghost", "{m}", "-o", "{out}", "--features", "100000"], "--features 100000 exceeds 64"),
    ("unknown-position", ["attach-ghost", "{m}", "-o", "{out}", "--positions", "o,zz"], "unknown --positions zz"),
    ("ghost-twice", ["attach-ghost", "{ghost}", "-o", "{out}"], "already has ghost modules"),
    ("groups-not-dividing", ["group-linear", "{m}", "-o", "{out}", "--groups", "3"], "does not divide"),
    ("share-groups-too-many", ["share-layers", "{m}", "-o", "{out}", "--groups", "5"], "between 1 and"),
    ("rank-too-large", ["factorize-embeddings", "{m}", "-o", "{out}", "--rank", "33"], "exceeds"),
    ("samples-zero", ["importance", "{m}", "-o", "{out}", *TRAIN, "--samples", "0"], "--samples"),
    ("unknown-task", ["importance", "{m}", "-o", "{out}", "--dataset", "{toy}", "--task", "sst3"], "unknown task 'sst3'"),
    ("unknown-text-column", ["importance", "{m}", "-o", "{out}", "--dataset", "{toy}", "--text-columns", "text"], "no column 'text'"),
    ("unknown-label-column", ["importance", "{m}", "-o", "{out}", *TRAIN, "--label-column", "y"], "no labels in column 'y'"),
    ("epochs-zero", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--epochs", "0"], "--epochs"),
    ("negative-learning-rate", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--learning-rate", "-1"], "must be positive"),
    ("negative-weight-decay", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--weight-decay", "-0.1"], "--weight-decay"),
    ("max-length-beyond-positions", ["finetune", "{m}", "-o", "{out}", "--dataset", "{toy}", "--text-columns", "sentence",
                                     "--max-length", "4096"], "exceeds the 160 tokens"),
    ("temperature-zero", ["distill", "--teacher", "{m}", "--student", "{pruned}", "-o", "{out}", *TRAIN, "--temperature", "0"],
     "--temperature"),
    ("seq-len-beyond-positions", ["info", "{m}", "--seq-len", "100000"], "--seq-len 100000"),
    ("unknown-split", ["eval", "{m}", "--dataset", "{toy}", "--text-columns", "sentence", "--split", "dev"], "cannot load split 'dev'"),
    # teacher and student that read text differently
    ("vocab-teacher-bert-student-other", ["distill", "--teacher", "{m}", "--student", "{other}", "-o", "{out}", *TRAIN],
     "different vocabularies"),
    ("vocab-teacher-other-student-bert", ["distill", "--teacher", "{other}", "--student", "{m}", "-o", "{out}", *TRAIN],
     "different vocabularies"),
    ("vocab-finetune-teacher", ["finetune", "{m}", "--teacher", "{other}", "-o", "{out}", *TRAIN], "different vocabularies"),
    # recipes
    ("recipe-unknown-key", ["run", "{world}/r-typo.yaml", "-o", "{out}"], "unknown key 'widht'"),
    ("recipe-bad-set", ["run", "{world}/r.yaml", "-o", "{out}", "--set", "prune.width"], "--set"),
    ("recipe-out-is-model", ["run", "{world}/r.yaml", "-o", "{m}", "--set", "model={m}"], "is the input model"),
    ("recipe-out-contains-recipe", ["run", "{world}/r.yaml", "-o", "{world}"], "contains the input"),
    ("recipe-stage-dir-is-model", ["run", "{world}/r.yaml", "-o", "{world}/runs", "--set", "model={world}/runs/01-prune"],
     "input model"),
    ("recipe-stage-reads-dataset", ["run", "{world}/r-train.yaml", "-o", "{toy}/run"], "input finetune.dataset"),
    ("recipe-out-is-a-file", ["run", "{world}/r.yaml", "-o", "{world}/r-train.yaml"], "is a file"),
    ("recipe-missing-model", ["run", "{world}/r.yaml", "-o", "{out}", "--set", "model=./nope"], "does not exist"),
    ("recipe-dry-run-out-is-model", ["run", "{world}/r.yaml", "-o", "{m}", "--dry-run"], "is the input model"),
]

# faults of the machine, simulated in-process: (id, arguments, patch, what the error line says)
FAULTS = [
    ("disk-full", ["attach-ghost", "{m}", "-o", "{out}"], "enospc", "free space at"),
    ("disk-full-in-rust", ["attach-ghost", "{m}", "-o", "{out}"], "enospc-text", "free space at"),
    ("read-only-fs", ["prune", "{m}", "-o", "{out}", "--width", "0.5"], "erofs", "read-only file system"),
    ("no-permission", ["attach-ghost", "{m}", "-o", "{out}"], "eacces", "fix the permissions of"),
]


def _patch(monkeypatch, kind: str) -> None:
    import tempfile

    import safetensors.torch
    from safetensors import SafetensorError

    import ghostify.checkpoint

    if kind == "enospc":
        def full(tensors, filename, metadata=None):
            raise OSError(errno.ENOSPC, "No space left on device", filename)

        monkeypatch.setattr(safetensors.torch, "save_file", full)
    elif kind == "enospc-text":
        def full_rust(tensors, filename, metadata=None):
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')

        monkeypatch.setattr(safetensors.torch, "save_file", full_rust)
    elif kind == "erofs":
        def read_only(prefix=None, dir=None, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system", os.path.join(str(dir), str(prefix)))

        monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    elif kind == "eacces":
        def forbidden(source, destination):
            raise PermissionError(errno.EACCES, "Permission denied", str(Path(destination) / "tokenizer.json"))

        monkeypatch.setattr(ghostify.checkpoint, "copy_tokenizer", forbidden)


def _fill(args: list[str], world: Path, out: Path) -> list[str]:
    def one(arg: str) -> str:
        return re.sub(r"\{([\w-]+)\}", lambda m: str(out if m.group(1) == "out" else world if m.group(1) == "world"
                                                  else world / m.group(1)), arg)

    return [one(a) for a in args]


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (the inputs) by its sha256, and every directory, so that any
    change, addition or removal shows."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "directory"
            for p in sorted(root.rglob("*"))}


def _beside(out: Path) -> set[str]:
    return {p.name for p in out.parent.iterdir()} if out.parent.is_dir() else set()


def _check_refused(capsys, world: Path, out: Path, args: list[str], expected: str, *,
                   inputs: tuple[Path, ...] = (), cwd: Path | None = None) -> None:
    """The case's one `error:` line contains ``expected``; nothing under ``world`` or the extra
    ``inputs`` changed; nothing was left at or beside ``out``. ``cwd``: run from that directory
    (relative paths in ``args`` are then relative to it)."""
    roots = (world, *inputs)
    before, beside = [_snapshot(r) for r in roots], _beside(out)
    if cwd is not None:
        previous = os.getcwd()
        os.chdir(cwd)
    try:
        code, stdout, stderr = run_cli(capsys, *args)
    finally:
        if cwd is not None:
            os.chdir(previous)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code != 0, stderr
    assert len(errors) == 1, stderr
    assert "Traceback" not in stdout + stderr
    assert expected in errors[0], errors[0]
    assert "weights_only" not in stderr  # never torch's advice to unpickle unsafely
    assert [_snapshot(r) for r in roots] == before, "an input changed"
    assert _beside(out) == beside, f"left beside the output: {_beside(out) ^ beside}"
    if not str(out).startswith(str(world)):
        assert not out.exists()


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(name, args, expected, world, tmp_path, capsys):
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(args, world, out), expected)


@pytest.mark.parametrize(("name", "args", "kind", "expected"), FAULTS, ids=[f[0] for f in FAULTS])
def test_machine_faults_say_what_to_do(name, args, kind, expected, world, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    _patch(monkeypatch, kind)
    _check_refused(capsys, world, out, _fill(args, world, out), expected)


def test_there_are_enough_cases():
    assert len(CASES) + len(FAULTS) >= 40


def test_the_vocabulary_error_names_both_checkpoints(world, tmp_path, capsys):
    code, _, err = run_cli(capsys, "distill", "--teacher", world / "other", "--student", world / "m", "-o", tmp_path / "o",
                           *_fill(TRAIN, world, tmp_path))
    assert code != 0 and str(world / "other") in err and str(world / "m") in err


# ----------------------------------------------------------------------------------------------
# signals: SIGTERM and SIGHUP end a run like Ctrl-C, cleaning up after themselves
# ----------------------------------------------------------------------------------------------
#: `python -m ghostify ARGS`, but pausing after the checkpoint's files are written into the
#: temporary directory (and before the rename), so that the signal surely arrives mid-write
PAUSED_WRITE = """\
import runpy, sys, time
import ghostify.checkpoint as checkpoint
write = checkpoint.write_checkpoint
def paused(*args, **kwargs):
    write(*args, **kwargs)
    print("WRITING", flush=True)
    time.sleep(120)
checkpoint.write_checkpoint = paused
sys.argv = ["ghostify", *sys.argv[1:]]
runpy.run_module("ghostify", run_name="__main__")
"""


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


@pytest.mark.parametrize(("signum", "code"), [pytest.param(signal.SIGTERM, 143, id="SIGTERM"),
                                             pytest.param(signal.SIGHUP, 129, id="SIGHUP", marks=pytest.mark.slow)])
def test_a_signal_during_a_write_leaves_nothing_behind(signum, code, world, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-c", PAUSED_WRITE, "attach-ghost", str(world / "m"), "-o", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert process.stdout.readline().strip() == "WRITING", process.stderr.read()
        assert any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir())  # mid-write indeed
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == code, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: terminated by {signal.Signals(signum).name}"], stderr
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == [], "the output or its temporary directory was left behind"


@pytest.mark.slow  # the full run (every day Ctrl-C during training, test_signals.py, and SIGTERM during a write
# above: the same handler)
def test_sigterm_during_training_exits_143_without_output(world, tmp_path):
    """`python -m ghostify finetune`, terminated while it trains: its resumable state
    (OUT.partial) stays, as after Ctrl-C; no output and no temporary directory."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "ghostify", "finetune", str(world / "m"), "-o", str(out), "--dataset", str(world / "toy"),
         "--text-columns", "sentence", "--max-length", "16", "--epochs", "200", "--batch-size", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and process.poll() is None and not (tmp_path / "out.partial" / "run.json").is_file():
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()[1]
        time.sleep(0.5)  # inside the training loop
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == ["error: terminated by SIGTERM"], stderr
    assert "Traceback" not in stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_main_restores_the_signal_handlers(capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    run_cli(capsys, "--help")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before


# ----------------------------------------------------------------------------------------------
# small ones: umask, stdout, help texts, the label rule
# ----------------------------------------------------------------------------------------------
def test_outputs_honour_the_umask(world, tmp_path, capsys):
    old = os.umask(0o027)
    try:
        code, _, err = run_cli(capsys, "attach-ghost", world / "m", "-o", tmp_path / "g")
    finally:
        os.umask(old)
    assert code == 0, err
    assert (tmp_path / "g").stat().st_mode & 0o777 == 0o750
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "g").iterdir()}
    assert modes and set(modes.values()) == {0o640}, modes


def test_info_and_eval_print_their_result_on_stdout(world, capsys):
    code, out, err = run_cli(capsys, "info", world / "pruned")
    assert code == 0 and "parameters" in out and "FFN per layer" in out, err
    assert "parameters" not in err
    code, out, err = run_cli(capsys, "eval", world / "m", "--dataset", world / "toy", "--text-columns", "sentence",
                             "--max-length", "32")
    assert code == 0, err
    assert "accuracy" in out and "accuracy" not in err


def test_every_help_keeps_its_angle_brackets(capsys):
    """rich's markdown mode eats `<...>` outside code spans (RUN_DIR/<nn>-<stage>/ became RUN_DIR/-/)."""
    import typer

    from ghostify.cli import commands  # noqa: F401
    from ghostify.cli.app import app

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        texts = [command.help or "", command.epilog or ""] + [getattr(p, "help", None) or "" for p in command.params]
        tags = set(re.findall(r"<[^<>\s]+>", " ".join(texts)))
        code, out, _ = run_cli(capsys, name, "--help")
        assert code == 0
        shown = re.sub(r"[\s│]+", " ", out)
        assert all(tag in shown for tag in tags), (name, [t for t in tags if t not in shown])
    code, out, _ = run_cli(capsys, "run", "--help")
    assert "<nn>-<stage>" in out


def test_one_rule_decides_whether_labels_are_a_regression():
    import datasets

    from ghostify.data import label_kind

    def rows(values, feature=None):
        features = datasets.Features({"label": feature}) if feature is not None else None
        return datasets.Dataset.from_dict({"label": values}, features=features)

    late = [1.0] * 1500 + [2.5]  # the non-integer score comes after a long whole-number prefix
    assert label_kind(rows(late), "label").regression
    assert label_kind(rows([0.0, 1.0, 2.0]), "label") == label_kind(rows([0, 1, 2]), "label")
    assert label_kind(rows([0, 1, 2]), "label").num_labels == 3
    assert label_kind(rows([0, 1], datasets.ClassLabel(names=["a", "b", "c"])), "label").num_labels == 3
    assert label_kind(rows([0.5, 3.2], datasets.Value("float32")), "label").num_labels == 1
    from ghostify.errors import DataError

    named = label_kind(rows(["pos", "neg", "pos"]), "label")  # class names: ids in sorted order, names kept
    assert (named.regression, named.num_labels, named.names, named.strings) == (False, 2, ("neg", "pos"), True)
    with pytest.raises(DataError, match="holds list values"):
        label_kind(rows([[1], [2]]), "label")


def test_plain_checkpoints_that_are_fine_still_load(world, tmp_path):
    """Strictness refuses only what is wrong: a safe pickle-only checkpoint loads, and a bare
    encoder loads into a classifier with a freshly initialised head and one warning."""
    from safetensors.torch import load_file

    from ghostify import load_model

    binary = _copy(world / "m", tmp_path / "bin")
    state = load_file(str(binary / "model.safetensors"))
    (binary / "model.safetensors").unlink()
    torch.save(state, binary / "pytorch_model.bin")
    assert type(load_model(binary)).__name__ == "BertForSequenceClassification"
    bare = tiny_model("bert", "base")
    bare.save_pretrained(tmp_path / "bare")
    with pytest.warns(UserWarning, match="freshly initialised"):
        load_model(tmp_path / "bare", head="sequence-classification", num_labels=2)
