"""A damaged training state (issue 48): ``finetune --resume`` (and ``distill --resume``) on an ``OUT.partial`` whose
files were cut off, emptied or edited is one `error:` line saying to start over with --overwrite, before any
step is trained; the state is left as it was, and no output is written. Formerly a truncated ``engine.json`` was
`unexpected JSONDecodeError`, ``{}`` `unexpected KeyError: 'engine'`, and a damaged ``progress.json``,
``run.json`` or state file another `unexpected` error; a damaged best checkpoint failed only after the whole run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from .test_bad_input import _check_refused, world  # noqa: F401

TRAIN = ["--text-columns", "sentence", "--label-column", "label", "--max-length", "32", "--epochs", "2",
         "--batch-size", "8", "--checkpoint-steps", "2"]


class _Crash(Exception):
    pass


@pytest.fixture(scope="session")
def interrupted(world, tmp_path_factory) -> Path:  # noqa: F811
    """``finetune`` of the world's model stopped at step 5 of 8: its state of step 4 (and best checkpoint) in
    ``out.partial``."""
    from ghostify.steps import finetune

    root = tmp_path_factory.mktemp("interrupted")

    def crash(step: int) -> None:
        if step == 5:
            raise _Crash

    with pytest.raises(_Crash):
        finetune(world / "m", root / "out", dataset=str(world / "toy"), text_columns=("sentence",),
                 label_column="label", max_length=32, epochs=2, batch_size=8, checkpoint_steps=2, on_step=crash)
    assert json.loads((root / "out.partial" / "state" / "progress.json").read_text())["step"] == 4
    return root


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])


def _edit_json(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))

    return apply


DAMAGED = "the interrupted run cannot be resumed; pass --overwrite to start over"
#: (id, the file in out.partial, how it is damaged, what the error line says besides DAMAGED)
CASES: list[tuple[str, str, Callable[[Path], None], str]] = [
    ("engine-truncated", "state/engine.json", _cut, "engine.json is not readable JSON (JSONDecodeError"),
    ("engine-empty-object", "state/engine.json", lambda p: p.write_text("{}"),
     "engine.json holds {}, not the engine and process count that saved the state"),
    ("engine-a-list", "state/engine.json", lambda p: p.write_text('["FSDP2", 2]'), "engine.json holds [\"FSDP2\", 2]"),
    ("engine-processes-zero", "state/engine.json", _edit_json(lambda d: d.__setitem__("processes", 0)),
     '"processes": 0}, not the engine and process count'),
    ("engine-processes-text", "state/engine.json", _edit_json(lambda d: d.__setitem__("processes", "two")),
     '"processes": "two"}'),
    ("engine-name-a-number", "state/engine.json", _edit_json(lambda d: d.__setitem__("engine", 2)), '{"engine": 2,'),
    ("engine-binary", "state/engine.json", lambda p: p.write_bytes(b"\xff\xfe\x00"), "engine.json is not readable JSON"),
    ("progress-truncated", "state/progress.json", _cut, "progress.json cannot be read (JSONDecodeError"),
    ("progress-unknown-key", "state/progress.json", lambda p: p.write_text('{"stepz": 4}'),
     "progress.json cannot be read (TypeError"),
    ("progress-a-list", "state/progress.json", lambda p: p.write_text("[4]"), "progress.json cannot be read"),
    ("progress-step-text", "state/progress.json", _edit_json(lambda d: d.__setitem__("step", "four")),
     "not the progress of a saved state"),
    ("progress-step-negative", "state/progress.json", _edit_json(lambda d: d.__setitem__("step", -4)),
     "not the progress of a saved state"),
    ("run-truncated", "run.json", _cut, "run.json is not readable JSON"),
    ("state-weights-truncated", "state/model.safetensors", _cut, "state cannot be read back (SafetensorError"),
    ("state-optimizer-missing", "state/optimizer.bin", Path.unlink, "state cannot be read back (FileNotFoundError"),
    ("state-optimizer-truncated", "state/optimizer.bin", _cut, "state cannot be read back (RuntimeError"),
    ("best-weights-truncated", "best/model.safetensors", _cut, "best/model.safetensors is empty, truncated or damaged"),
    ("best-weights-empty", "best/model.safetensors", lambda p: p.write_bytes(b""), "is empty, truncated or damaged"),
]


@pytest.mark.parametrize(("name", "file", "damage", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_state_is_refused_before_training_and_kept(name, file, damage, expected, world, interrupted,  # noqa: F811
                                                            tmp_path, capsys):
    shutil.copytree(interrupted / "out.partial", tmp_path / "out.partial")
    damage(tmp_path / "out.partial" / file)
    out = tmp_path / "out"
    args = ["finetune", str(world / "m"), "-o", str(out), "--dataset", str(world / "toy"), *TRAIN, "--resume"]
    _check_refused(capsys, world, out, args, expected, inputs=(tmp_path / "out.partial",))
    from .conftest import run_cli

    code, _, err = run_cli(capsys, *args)  # the same line again: nothing was changed or started
    assert code == 2 and DAMAGED in err


def test_the_undamaged_state_resumes_and_overwrite_starts_over(world, interrupted, tmp_path, capsys):  # noqa: F811
    """The cases fail for the damage they make: the state as saved resumes, and --overwrite starts a damaged one over."""
    from .conftest import run_cli

    shutil.copytree(interrupted / "out.partial", tmp_path / "a.partial")
    code, _, err = run_cli(capsys, "finetune", world / "m", "-o", tmp_path / "a", "--dataset", world / "toy", *TRAIN,
                           "--resume")
    assert code == 0 and (tmp_path / "a" / "config.json").is_file(), err
    shutil.copytree(interrupted / "out.partial", tmp_path / "b.partial")
    (tmp_path / "b.partial" / "state" / "engine.json").write_text("{}")
    code, _, err = run_cli(capsys, "finetune", world / "m", "-o", tmp_path / "b", "--dataset", world / "toy", *TRAIN,
                           "--overwrite")
    assert code == 0 and (tmp_path / "b" / "config.json").is_file(), err
