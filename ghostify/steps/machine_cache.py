"""ghostify's cache of what was measured on this machine (latency models, the dense model in every deployment):
where it lives, the key of this machine, one process measuring a key at a time, and storing that never loses what
was measured."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..files import held_lock, write_text_atomically
from ..runtimes import target

#: the environment variable naming ghostify's cache directory (else ``$XDG_CACHE_HOME/ghostify``, else
#: ``~/.cache/ghostify``)
CACHE_ENV = "GHOSTIFY_CACHE"


def cache_dir() -> Path:
    """ghostify's cache directory: ``$GHOSTIFY_CACHE``, else ``$XDG_CACHE_HOME/ghostify``, else
    ``~/.cache/ghostify``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "ghostify"
    return Path.home() / ".cache" / "ghostify"


def machine_key(*runtimes: str) -> str:
    """This machine as far as a timing goes: the CPU, how many, and the versions of what runs the deployments
    ``runtimes`` (each runtime's version string: a new version is measured again)."""
    cpu = _cpu_model() or platform.processor() or platform.machine() or "unknown CPU"
    # eager PyTorch, or the exporter that wrote the graph, and the runtimes' own
    versions = dict.fromkeys([f"torch {torch.__version__}", *(v for r in runtimes for v in target(r).versions())])
    return f"{cpu} x {os.cpu_count()}; " + ", ".join(versions)


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def lock_file(path: Path) -> Path:
    """The lock held while the cache entry ``path`` is measured (in a folder of their own, so that each kind of
    entry's folder holds only its entries)."""
    return cache_dir() / "locks" / f"{path.stem}.lock"


@contextlib.contextmanager
def measuring(path: Path, say: Callable[[str], None], what: str = "this latency model"):
    """Hold the measuring lock of the cache entry ``path`` (``flock`` on ``<cache>/locks/<entry>.lock``,
    released by the OS however the holder ends): two runs measuring this machine at once would each time the
    other's load into their models, and measure twice what one can measure once. A cache where no lock file
    can be made is used unlocked."""
    lock = lock_file(path)
    with contextlib.ExitStack() as stack:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(held_lock(lock, lambda: say(f"another process is measuring {what} ({lock}): "
                                                            "waiting for its result")))
        except OSError:  # a read-only cache: measuring still works, storing says why it did not
            pass
        yield


def store(path: Path, data: dict[str, Any], what: str = "the latency model") -> bool:
    """Cache ``data`` at ``path`` (JSON); True when it is. The cache only saves time: a directory in the way, a
    read-only or full disk is one warning, never the loss of what was measured (the caller still has it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        fix = f"remove the directory {path}" if path.is_dir() else f"set {CACHE_ENV} to a writable directory"
        warnings.warn(f"{what} was not cached at {path} ({reason}); it is measured again next time: "
                      f"{fix} to keep it", stacklevel=3)
        return False
    return True


__all__ = ["CACHE_ENV", "cache_dir", "lock_file", "machine_key", "measuring", "store"]
