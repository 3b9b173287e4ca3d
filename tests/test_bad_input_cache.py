"""The latency cache (issue 36, items 6-9 and more): a cached entry is validated whole when it is read,
and a bad one (a row without ``predicted_ms``, ``measured_ms: 0``, costs that are negative or sum to
infinity, not JSON at all) is measured again with one warning; a cache that cannot be written (a
directory in the way, a read-only or full disk) never loses the measurement: ``ghostify latency``
prints it, says in one warning that it was not cached and why, and leaves no temporary file. Inputs
are hashed before and after, as in ``tests/test_bad_input.py``."""

from __future__ import annotations

import errno
import importlib
import json
import pathlib
from pathlib import Path

import pytest

from ghostify.checkpoint import load_config
from ghostify.latency_model import Deployment, LatencyModel
from ghostify.steps.latency import cache_file, machine_key, original_geometry

from .conftest import run_cli
from .test_bad_input import _beside, _snapshot, world  # noqa: F401

module = importlib.import_module("ghostify.steps.latency")  # the package's ``latency`` is the step function
DEPLOYMENT = Deployment(runtime="pytorch", seq_len=32)
LATENCY = ["latency", "{m}", "--runtime", "pytorch", "--seq-len", "32", "--rounds", "2", "--warmup", "0"]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("GHOSTIFY_CACHE", str(directory))
    return directory


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """The timing replaced by constant times (fast), counting the measurements."""
    calls = []

    def take_turns(runs, *, rounds, warmup):
        calls.append(len(runs))
        return [[1.0 + i] * rounds for i in range(len(runs))], [[1.0] * rounds for _ in runs]

    monkeypatch.setattr(module, "take_turns", take_turns)
    return calls


def _entry(world: Path) -> Path:  # noqa: F811
    """Where the tiny model's latency model in DEPLOYMENT is cached (under the test's GHOSTIFY_CACHE)."""
    return cache_file(original_geometry(load_config(world / "m")), DEPLOYMENT, machine_key("pytorch"))


def _edit(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _fail_writes_under(monkeypatch, root: Path, code: int, message: str) -> None:
    """Writing any file under ``root`` fails as on a read-only or full disk (root owns every file here, so
    permissions cannot make a real read-only directory)."""
    write_text = pathlib.Path.write_text

    def refuse(self, *args, **kwargs):
        if str(self).startswith(str(root)):
            raise OSError(code, message, str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", refuse)


def _rows(data, kind: str, i: int) -> dict:
    return data[kind][i]


#: (id, how the cached entry (or the cache) is damaged, what the one warning says, whether the new measurement
#: is cached); each damage is ``kind`` applied by :func:`_damage`
CASES: list[tuple[str, str, str, bool]] = [
    # issue 36, items 6-9
    ("row-without-predicted", "no-predicted", "validation[0]: predicted_ms = None, not a finite number", True),
    ("row-measured-zero", "measured-zero", "measured_ms = 0: a forward pass takes some time", True),
    ("entry-is-a-directory", "directory", "(Is a directory); it is measured again next time: remove the directory",
     False),
    ("read-only-cache", "read-only", "(Read-only file system); it is measured again next time: set GHOSTIFY_CACHE",
     False),
    # more
    ("probe-not-a-mapping", "probe-not-a-mapping", "probes[0]: 1 is not a mapping", True),
    ("measured-a-string", "measured-a-string", "probes[1]: measured_ms = 'fast', not a finite number", True),
    ("measured-nan", "measured-nan", "validation[1]: measured_ms = nan, not a finite number", True),
    ("widths-of-other-depths", "widths-differ", "are not one count per layer each", True),
    ("validation-without-name", "no-name", "validation[0]: name = None, not a string", True),
    ("negative-cost", "negative-cost", "each must be a finite number of milliseconds, 0 or more", True),
    ("costs-summing-to-infinity", "huge-costs", "whose sum for the dense model is inf ms, not a finite number", True),
    ("entry-is-a-list", "list", "is not a JSON object", True),
    ("entry-empty", "empty", "is not readable JSON", True),
    ("cache-folder-is-a-file", "parent-is-a-file", "was not cached at", False),
    ("disk-full", "disk-full", "(No space left on device); it is measured again next time", False),
    ("entry-of-another-deployment", "other-deployment", "it describes BERT, 2 layers", True),
]


def _damage(kind: str, path: Path, monkeypatch) -> None:
    edits = {
        "no-predicted": lambda d: _rows(d, "validation", 0).pop("predicted_ms"),
        "measured-zero": lambda d: _rows(d, "validation", 0).__setitem__("measured_ms", 0),
        "probe-not-a-mapping": lambda d: d["probes"].__setitem__(0, 1),
        "measured-a-string": lambda d: _rows(d, "probes", 1).__setitem__("measured_ms", "fast"),
        "measured-nan": lambda d: _rows(d, "validation", 1).__setitem__("measured_ms", float("nan")),
        "widths-differ": lambda d: _rows(d, "validation", 0).__setitem__("neurons", [37]),
        "no-name": lambda d: _rows(d, "validation", 0).pop("name"),
        "negative-cost": lambda d: d.__setitem__("head_ms", -0.5),
        "huge-costs": lambda d: d.update(base_ms=1e308, layer_ms=1e308, head_ms=1e308, neuron_ms=1e308),
        "other-deployment": lambda d: d["deployment"].__setitem__("threads", 2),
    }
    if kind in edits:
        _edit(path, edits[kind])
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "list":
        path.write_text("[1, 2]")
    elif kind == "empty":
        path.write_text("")
    elif kind == "parent-is-a-file":
        directory = path.parent
        for child in directory.iterdir():
            child.unlink()
        directory.rmdir()
        directory.write_text("not a directory")
    elif kind == "read-only":
        path.unlink()
        _fail_writes_under(monkeypatch, path.parent.parent, errno.EROFS, "Read-only file system")
    elif kind == "disk-full":
        path.unlink()
        _fail_writes_under(monkeypatch, path.parent.parent, errno.ENOSPC, "No space left on device")
    else:
        raise AssertionError(kind)


def _temporary_files(cache: Path) -> list[str]:
    return [p.name for p in cache.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize(("name", "kind", "warning", "cached"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_cache_is_measured_again_with_one_warning(name, kind, warning, cached, world, cache, counted,  # noqa: F811
                                                        monkeypatch, tmp_path, capsys):
    from ghostify.steps import latency

    latency(world / "m", runtime="pytorch", seq_len=32, rounds=2, warmup=0)  # a good entry, then damaged
    path = _entry(world)
    assert path.is_file() and len(counted) == 1
    _damage(kind, path, monkeypatch)
    out = tmp_path / "out"
    before, beside = _snapshot(world), _beside(out)
    code, stdout, stderr = run_cli(capsys, *[a.replace("{m}", str(world / "m")) for a in LATENCY], "-o", out)
    assert code == 0, stderr
    assert "Traceback" not in stdout + stderr and not [line for line in stderr.splitlines() if line.startswith("error:")]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warning in warnings[0], stderr
    assert len(counted) == 2  # measured again, once
    assert "fitted:" in stdout and "dense" in stdout  # the result is printed all the same
    assert LatencyModel.load(out).dense_ms() > 0  # and written to -o
    assert _snapshot(world) == before, "an input changed"
    assert _beside(out) == beside | {"out"}
    assert _temporary_files(cache) == []
    if cached:
        assert LatencyModel.load(path) == LatencyModel.load(out)  # the bad entry was replaced
        assert "cached as" in stderr
    else:
        assert "cached as" not in stderr


def test_a_good_entry_is_read_without_a_warning(world, cache, counted, capsys):  # noqa: F811
    args = [a.replace("{m}", str(world / "m")) for a in LATENCY]
    code, _, err = run_cli(capsys, *args)
    assert code == 0 and "cached as" in err, err
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "measured before" in err and "warning" not in err, err
    assert len(counted) == 1 and "fitted:" in out


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    """``write_text_atomically`` (every small output file): a directory in the way fails, and no ``.x.tmp-*`` stays."""
    from ghostify.files import write_text_atomically

    (tmp_path / "x.json").mkdir()
    with pytest.raises(IsADirectoryError):
        write_text_atomically(tmp_path / "x.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
