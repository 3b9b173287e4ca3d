"""``--report-to`` with a tracker that is installed but broken: its import fails, it lacks what
Accelerate calls, it is not a package at all, or it fails to start. Each is one `error:` line naming
the tracker, what went wrong and the fix, before any training, with every input as it was and
nothing at or beside the output (no ``OUT.partial``). The broken packages are real ones on
``PYTHONPATH`` in a fresh process, as a user's environment would have them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ghostify.settings import TrainSettings

from .conftest import REPO, every_day_rows
from .test_bad_input import _beside, _check_refused, _fill, _snapshot, world  # noqa: F401

TRAIN = ["--dataset", "{toy}", "--text-columns", "sentence", "--max-length", "16", "--epochs", "1", "--batch-size", "8"]
#: what a broken package holds: (its __init__.py, whether pip's metadata says it is installed)
PACKAGES = {
    "wandb-import-fails": ("wandb", 'raise ImportError("libwandb_core.so: cannot open shared object file")\n', True),
    "wandb-without-init": ("wandb", '__version__ = "0.19.0"\n', True),
    "wandb-without-metadata": ("wandb", '__version__ = "0.19.0"\n', False),
    "wandb-init-fails": ("wandb", 'def init(**kwargs):\n    raise RuntimeError("api_key not configured (no-tty)")\n',
                         True),
    "tensorboard-import-fails": ("tensorboard", 'raise RuntimeError("protobuf 3 is too old for this tensorboard")\n', True),
    "mlflow-no-server": ("mlflow", 'def search_experiments(**kwargs):\n'
                                   '    raise ConnectionError("no tracking server at http://localhost:5000")\n', True),
}


@pytest.fixture(scope="session")
def broken(tmp_path_factory) -> Path:
    """One directory per broken package, to put first on PYTHONPATH."""
    root = tmp_path_factory.mktemp("broken-trackers")
    for name, (package, init, installed) in PACKAGES.items():
        (root / name / package).mkdir(parents=True)
        (root / name / package / "__init__.py").write_text(init)
        if installed:
            info = root / name / f"{package}-0.19.0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.19.0\n")
    return root


#: (id, the broken package, the command, what the error line says)
CASES = [
    ("wandb-import-fails", "wandb-import-fails", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "wandb"],
     "--report-to wandb: the wandb package is installed but does not import (ImportError: libwandb_core.so"),
    ("wandb-without-init", "wandb-without-init", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "wandb"],
     "--report-to wandb: the tracker did not start (AttributeError: module 'wandb' has no attribute 'init')"),
    ("wandb-without-metadata", "wandb-without-metadata", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to",
                                                          "wandb"],
     "--report-to wandb: wandb can be imported but is not an installed package"),
    ("wandb-not-logged-in", "wandb-init-fails", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "wandb"],
     "the tracker did not start (RuntimeError: api_key not configured (no-tty))"),
    ("wandb-after-tensorboard", "wandb-without-init", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to",
                                                       "tensorboard,wandb"], "--report-to wandb: the tracker did not start"),
    ("wandb-in-distill", "wandb-import-fails", ["distill", "--teacher", "{m}", "--student", "{m}", "-o", "{out}", *TRAIN,
                                                "--report-to", "wandb"], "the wandb package is installed but does not import"),
    ("tensorboard-import-fails", "tensorboard-import-fails", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to",
                                                              "tensorboard"],
     "--report-to tensorboard: the tensorboard package is installed but does not import (RuntimeError: protobuf 3"),
    ("mlflow-without-a-server", "mlflow-no-server", ["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "mlflow"],
     "--report-to mlflow: the tracker did not start (ConnectionError: no tracking server at http://localhost:5000)"),
]


#: one row of each way a tracker fails, every day (the others meet the same handling: --all)
#: (mlflow without a server: the full run's; a tracker that fails at its first call is wandb-without-init's handling)
EVERY_DAY = ("wandb-import-fails", "wandb-without-init", "wandb-without-metadata", "tensorboard-import-fails")


@pytest.mark.parametrize(("name", "package", "args", "expected"), every_day_rows(CASES, EVERY_DAY))
def test_a_broken_tracker_is_one_line_before_any_output(name, package, args, expected, broken, world, tmp_path):
    out = tmp_path / "out"
    before, beside = _snapshot(world), _beside(out)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(broken / package), str(REPO)]),
               WANDB_MODE="offline")
    result = subprocess.run([sys.executable, "-m", "ghostify", *_fill(args, world, out)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert _snapshot(world) == before, "an input changed"
    assert _beside(out) == beside == set(), f"left beside the output: {_beside(out)}"  # no OUT, no OUT.partial


def test_a_tracker_that_fails_to_start_in_process_leaves_no_partial_run(world, tmp_path, capsys, monkeypatch):
    """TensorBoard's writer cannot create its directory: one line, and the run's OUT.partial, made
    just before, is gone again."""
    from accelerate.tracking import TensorBoardTracker

    def refused(self):
        raise PermissionError(13, "Permission denied", str(tmp_path / "out.partial" / "runs"))

    monkeypatch.setattr(TensorBoardTracker, "start", refused)
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(["finetune", "{m}", "-o", "{out}", *TRAIN, "--report-to", "tensorboard"],
                                             world, out),
                   "--report-to tensorboard: the tracker did not start (PermissionError: [Errno 13] Permission denied")
    assert list(tmp_path.iterdir()) == []


def test_a_tracker_named_twice_is_one_tracker():
    assert TrainSettings(report_to="tensorboard,tensorboard").report_to == ("tensorboard",)
    assert TrainSettings(report_to=["wandb", "tensorboard", "wandb"]).report_to == ("wandb", "tensorboard")


def test_there_are_enough_tracker_cases():
    assert len(CASES) >= 8
