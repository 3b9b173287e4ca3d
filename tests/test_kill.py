"""`ghostify run` killed with SIGKILL at random moments, then re-run to completion, ends with the
same weights as an uninterrupted run, and a kill never leaves a visible stage directory that is not
a complete checkpoint.

The moments come from a seeded RNG and are tied to what the run is doing (seen on disk), so they
hold on a slow or busy machine: during training steps, during a checkpoint write (a temporary
directory exists), in the window after a stage's checkpoint is in place but before the run recorded
the stage as done, and at a random time during a later training stage.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ghostify import load_model
from ghostify.testing import tiny_checkpoint, write_toy_dataset

RECIPE = """\
model: {model}
teacher: ${{teacher}}
data: {{dataset: {data}, text_columns: [sentence], label_column: label, max_length: 32}}
seed: 5
stages:
  - finetune: {{output: teacher, epochs: 2, batch_size: 8, learning_rate: 3.0e-3, checkpoint_steps: 3}}
  - importance: {{samples: 32}}
  - prune: {{width: 0.5}}
  - attach-ghost: {{}}
  - distill: {{epochs: 2, batch_size: 8, learning_rate: 1.0e-3, checkpoint_steps: 3, max_samples: 64}}
  - finetune: {{output: final, epochs: 1, batch_size: 8, learning_rate: 1.0e-3, checkpoint_steps: 3}}
"""
STAGES = ["01-teacher", "02-importance", "03-prune", "04-attach-ghost", "05-distill", "06-final"]
TRAINED = {"01-teacher", "05-distill", "06-final"}
VISIBLE = re.compile(r"^\d\d-[\w-]+$")  # a stage directory: not hidden, not NN-name.partial
TIMEOUT = 300


def _env() -> dict[str, str]:
    # one thread per process: the machine is shared, and the thread count is part of what makes
    # two runs bit-identical
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                GHOSTIFY_DEBUG="1")  # a failing run shows its traceback


def _command(recipe: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "ghostify", "run", str(recipe), "-o", str(run_dir)]


def _run(recipe: Path, run_dir: Path) -> dict[str, float]:
    """An uninterrupted run; returns when (s after its start) each stage's work directory
    (``NN-x.partial``) and output appeared, and ``"end"``."""
    seen: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(_command(recipe, run_dir), env=_env(), stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
        try:
            while process.poll() is None and time.perf_counter() - started < TIMEOUT:
                if run_dir.is_dir():
                    for name in os.listdir(run_dir):
                        seen.setdefault(name, time.perf_counter() - started)
                time.sleep(0.002)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        assert process.returncode == 0, f"ghostify run {run_dir.name} failed:\n{_tail(log)}"
    seen["end"] = time.perf_counter() - started
    return seen


# -- the moments ------------------------------------------------------------------------------
# Each is a function of the run directory that says when to kill (True), polled every millisecond
# or so; `rng` draws its parameters once, up front.
def _checkpoint_write(nth: int):
    """While the ``nth`` temporary directory seen is being written: the training state
    (``NN-x.partial/state.tmp``), the best checkpoint so far or a stage's output (``.NN-x.tmp-*``)."""
    seen: set[str] = set()

    def due(run_dir: Path) -> bool:
        for path in _temporary(run_dir):
            seen.add(str(path))
        return len(seen) >= nth

    return due


def _temporary(run_dir: Path):
    try:
        for entry in os.scandir(run_dir):
            if ".tmp-" in entry.name:
                yield entry.path
            elif entry.name.endswith(".partial") and entry.is_dir():
                for inner in os.scandir(entry.path):
                    if inner.name == "state.tmp" or ".tmp-" in inner.name:
                        yield inner.path
    except FileNotFoundError:
        return


def _between_stages(stage: str):
    """After ``stage``'s checkpoint is in place, before (or, if that window is missed, right
    after) the run records it as done in its stage.json."""

    def due(run_dir: Path) -> bool:
        return (run_dir / stage).is_dir()

    return due


def _elapsed(after: str, delay: float):
    """``delay`` s after ``after`` appeared (a stage's .partial work directory, say)."""
    seen: list[float] = []

    def due(run_dir: Path) -> bool:
        if not seen and (run_dir / after).exists():
            seen.append(time.perf_counter())
        return bool(seen) and time.perf_counter() - seen[0] >= delay

    return due


def _run_until(recipe: Path, run_dir: Path, due) -> bool:
    """Run in a new session and SIGKILL the whole process group when ``due``; False when the run
    ended by itself first."""
    deadline = time.monotonic() + TIMEOUT
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(_command(recipe, run_dir), env=_env(), stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
        try:
            while process.poll() is None and time.monotonic() < deadline:
                if due(run_dir):
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return True
                time.sleep(0.001)
            assert process.poll() is not None, "the run neither ended nor reached its kill moment in time"
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        assert process.returncode == 0, f"the run failed before its kill moment:\n{_tail(log)}"
    return False


def _tail(log) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-3000:]


# -- what must hold -----------------------------------------------------------------------------
def _check_visible_stages(run_dir: Path, moment: str) -> list[str]:
    """Every visible stage directory is a complete checkpoint; returns their names."""
    visible = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and VISIBLE.match(p.name)) if run_dir.is_dir() else []
    for name in visible:
        directory = run_dir / name
        where = f"{name} after the kill {moment}"
        try:
            load_model(directory)
        except Exception as exc:  # noqa: BLE001 - the message says what was incomplete
            raise AssertionError(f"{where} is not a loadable checkpoint: {exc}") from exc
        if "importance" in name:
            assert load_file(str(directory / "importance.safetensors")), f"{where}: no importance scores"
        if name in TRAINED:
            json.loads((directory / "training.json").read_text())
        if (directory / "stage.json").exists():
            json.loads((directory / "stage.json").read_text())
    return visible


def _tensors(directory: Path) -> dict[str, torch.Tensor]:
    tensors = {f"model.{k}": v for k, v in load_model(directory).state_dict().items()}
    for extra in ("importance.safetensors", "distill_projections.safetensors"):
        if (directory / extra).is_file():
            tensors.update({f"{extra}:{k}": v for k, v in load_file(str(directory / extra)).items()})
    return tensors


def _differences(a: Path, b: Path) -> list[str]:
    out = []
    for stage in STAGES:
        left, right = _tensors(a / stage), _tensors(b / stage)
        if left.keys() != right.keys():
            out.append(f"{stage}: different tensors {sorted(left.keys() ^ right.keys())[:3]}")
            continue
        out += [f"{stage}: {k}" for k in left if not torch.equal(left[k], right[k])]
    return out


def _training_log(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # many kills, a minute; every day: the recipe, staged compress and distill resume tests
def test_killed_at_random_moments_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    torch.set_num_threads(1)
    data = write_toy_dataset(tmp_path / "toy", train=128, validation=32)
    tiny_checkpoint(tmp_path / "model")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(model=tmp_path / "model", data=data))

    whole = tmp_path / "whole"
    seen = _run(recipe, whole)

    def training(stage: str) -> tuple[str, float]:
        """A random moment while ``stage`` trained in the uninterrupted run: seconds after its
        work directory appeared."""
        fraction = rng.uniform(0.15, 0.85)
        return f"{stage}.partial", fraction * (seen[stage] - seen[f"{stage}.partial"])

    rng = random.Random(20240611)
    moments = [
        ("during the teacher's training steps", _elapsed(*training("01-teacher"))),
        ("during a checkpoint write", _checkpoint_write(rng.randint(1, 3))),
        ("between stages", _between_stages(rng.choice(["02-importance", "03-prune", "04-attach-ghost"]))),
        ("during distillation", _elapsed(*training("05-distill"))),
        ("during the final fine-tuning", _elapsed(*training("06-final"))),
    ]
    run_dir = tmp_path / "killed"
    killed = []
    for moment, due in moments:
        if _run_until(recipe, run_dir, due):
            killed.append(moment)
            writing = sorted(os.path.relpath(p, run_dir) for p in _temporary(run_dir))
            print(f"killed {moment}: {sorted(p.name for p in run_dir.iterdir())}, being written: {writing}")
            _check_visible_stages(run_dir, moment)
        else:
            break  # it finished before this moment came; the ones after it cannot come either
    assert len(killed) >= 3, f"only {len(killed)} kills landed ({killed}); the run ({seen['end']:.1f}s) was too quick"

    finished = subprocess.run([*_command(recipe, run_dir), "--json"], env=_env(), capture_output=True, text=True,
                              timeout=TIMEOUT)
    assert finished.returncode == 0, f"the re-run after {len(killed)} kills failed:\n{finished.stderr[-3000:]}"
    assert _check_visible_stages(run_dir, "(none: finished)") == STAGES
    leftovers = [p.name for p in run_dir.iterdir() if p.name.startswith(".") or p.name.endswith(".partial")]
    assert not leftovers, f"the finished run left temporary directories behind: {leftovers}"

    differ = _differences(whole, run_dir)
    if differ:
        again = tmp_path / "whole-again"
        _run(recipe, again)
        nondeterministic = _differences(whole, again)
        assert not nondeterministic, (
            "two uninterrupted runs of the same recipe and seed differ, so resuming cannot be checked: the "
            f"commands are not deterministic (a seeding bug, not a resume bug): {nondeterministic[:5]}"
        )
    assert not differ, f"after kills {killed}, the resumed run's weights differ from an uninterrupted run's: {differ[:5]}"
    # the training logs are those of one run: an interrupted stage logs each step once, the same
    for stage in sorted(TRAINED):
        assert _training_log(run_dir / stage) == _training_log(whole / stage), f"{stage}/metrics.jsonl differs"


SHORT = """\
model: {model}
data: {{dataset: {data}, text_columns: [sentence], label_column: label, max_length: 32}}
seed: 1
stages:
  - finetune: {{output: teacher, epochs: 1, batch_size: 16, learning_rate: 3.0e-3, checkpoint_steps: 2}}
  - prune: {{width: 0.5}}
"""


class _Killed(BaseException):
    """Stands for a SIGKILL at one exact moment (a real one cannot be aimed that precisely)."""


@pytest.mark.filterwarnings("ignore:no importance scores")
def test_a_kill_after_a_training_output_is_in_place_before_its_work_directory_is_gone(tmp_path, monkeypatch):
    """The narrowest window of a training stage: OUT is in place, OUT.partial not yet removed and
    stage.json not yet written. The re-run resumes the finished state and writes OUT again: it
    must find the best checkpoint whole in OUT.partial (it used to be moved out, so OUT was
    replaced by a directory without weights), and ending the re-run must not leave a half-removed
    OUT.partial behind."""
    from contextlib import contextmanager

    from ghostify import recipe as recipes
    from ghostify.training import loop

    torch.set_num_threads(1)
    data = write_toy_dataset(tmp_path / "toy", train=64, validation=16)
    tiny_checkpoint(tmp_path / "model")
    path = tmp_path / "recipe.yaml"
    path.write_text(SHORT.format(model=tmp_path / "model", data=data))
    run_dir = tmp_path / "run"
    real = loop.atomic_directory

    @contextmanager
    def killed_after_rename(output, **kwargs):
        with real(output, **kwargs) as tmp:
            yield tmp
        if Path(output).name == "01-teacher":
            raise _Killed

    monkeypatch.setattr(loop, "atomic_directory", killed_after_rename)
    try:
        recipes.run(recipes.load(path), run_dir)
        raise AssertionError("the simulated kill did not happen")
    except _Killed:
        pass
    monkeypatch.setattr(loop, "atomic_directory", real)
    assert (run_dir / "01-teacher.partial").is_dir() and not (run_dir / "01-teacher" / "stage.json").exists()
    before = _tensors(run_dir / "01-teacher")

    report = recipes.run(recipes.load(path), run_dir)
    assert [row["status"] for row in report["stages"]] == ["ran", "ran"]
    assert _check_visible_stages(run_dir, "after the teacher's output was renamed") == ["01-teacher", "02-prune"]
    after = _tensors(run_dir / "01-teacher")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not (run_dir / "01-teacher.partial").exists()
    assert len(_training_log(run_dir / "01-teacher")) == len({json.dumps(r) for r in _training_log(run_dir / "01-teacher")})


def test_a_resumed_training_run_logs_each_step_once(tmp_path):
    """Killed after logging step 10 but before saving its state (saved at 9): the resumed run
    redoes step 10 and must not log it twice."""
    from ghostify.steps import finetune

    torch.set_num_threads(1)
    data = write_toy_dataset(tmp_path / "toy", train=64, validation=16)
    tiny_checkpoint(tmp_path / "model")
    out = tmp_path / "out"
    options = dict(dataset=str(data), text_columns=("sentence",), label_column="label", max_length=32, epochs=1,
                   batch_size=4, learning_rate=1e-3, checkpoint_steps=3, seed=2)

    def kill(step: int) -> None:
        if step == 11:
            raise _Killed

    try:
        finetune(tmp_path / "model", out, on_step=kill, **options)
        raise AssertionError("the simulated kill did not happen")
    except _Killed:
        pass
    finetune(tmp_path / "model", out, resume=True, **options)
    log = _training_log(out)
    assert [r["step"] for r in log if "loss" in r] == [10], log
    assert [r["step"] for r in log if "eval" in r] == [16], log
    finetune(tmp_path / "model", tmp_path / "whole", **options)
    assert log == _training_log(tmp_path / "whole")  # the same mean losses as an uninterrupted run
