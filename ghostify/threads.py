"""How ghostify's command line lets torch's CPU threads wait: asleep, not spinning.

torch's CPU wheels run their parallel regions (matrix products, oneDNN, element-wise kernels) on GNU
OpenMP. Between two regions, libgomp's default has every worker thread spin on its core for a while
before it sleeps, so that the next region starts a few microseconds sooner. On a machine of its own
that is nearly free; on a machine shared with other jobs (a CI runner, a workstation running a
benchmark) the spinning threads take the cores the working ones and the other jobs need. Measured on
a 2-core machine at load average 6–8 (``benchmarks/results/threads_under_load.md``): a short
``ghostify finetune`` used about half the CPU with ``OMP_WAIT_POLICY=PASSIVE`` (workers sleep at
once) than with libgomp's default, and its wall time fell with it.

libgomp reads the variable once, when torch is imported, so the command line sets it before any
command imports torch, and only where the user has not set it (``OMP_WAIT_POLICY=ACTIVE`` or
``GOMP_SPINCOUNT`` still win). The thread count is left to torch (one per core, or
``OMP_NUM_THREADS``): it changes how sums are rounded, so it is the user's choice, and
reproducibility is stated per thread count. Python code that imports torch itself sets the variable
before that import if it wants the same.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: libgomp's wait policy and ghostify's default for it
WAIT_POLICY = "OMP_WAIT_POLICY"
DEFAULT_WAIT_POLICY = "PASSIVE"
#: what already decides how long libgomp's threads spin, when the user set it
_USER_SPIN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def set_thread_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Let idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user chose how they wait.
    Takes effect only before torch is first imported in this process (and in the processes it starts)."""
    if not any(environ.get(name) for name in _USER_SPIN):
        environ[WAIT_POLICY] = DEFAULT_WAIT_POLICY


__all__ = ["DEFAULT_WAIT_POLICY", "WAIT_POLICY", "set_thread_defaults"]
