"""How ghostify's command line sets up torch's CPU runtime: idle threads asleep, not spinning; room for its kernels.

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

The same goes for oneDNN's primitive cache (:func:`set_kernel_cache_default`), which torch's bfloat16 matrix
products on the CPU go through: a primitive is a kernel made for one shape, and a training run whose batches are
padded to their longest text makes one for every length, every distinct layer width and each of the forward and
backward products. oneDNN keeps 1,024 by default and makes the others again each time they come back. The bf16
fine-tune of a 6x SST-2 student (three pruned layers, 300 steps of 32 texts padded to the longest; a 2-core AMD
EPYC with AVX-512 BF16) needs 1,762 primitives: with oneDNN's cache it made 4,271 and its loop took 3.74 ms an
example, with room for them all 3.18 (``benchmarks/results/kernel_cache.md``; the making itself, 1.8 s against 0.4,
is a quarter of the 5.4 s the loop saved: where the rest went was not measured). oneDNN reads
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` when it makes its first primitive, so the command line sets it first, unless
the user has.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: libgomp's wait policy and ghostify's default for it
WAIT_POLICY = "OMP_WAIT_POLICY"
DEFAULT_WAIT_POLICY = "PASSIVE"
#: what already decides how long libgomp's threads spin, when the user set it
_USER_SPIN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


#: oneDNN's primitive cache (oneDNN's default: 1,024 primitives) and ghostify's default for it: room for every
#: shape of a training run of a pruned student (1,762 in the measurement above; its peak memory fell, not rose)
KERNEL_CACHE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
DEFAULT_KERNEL_CACHE = "8192"


def set_thread_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Let idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user chose how they wait.
    Takes effect only before torch is first imported in this process (and in the processes it starts)."""
    if not any(environ.get(name) for name in _USER_SPIN):
        environ[WAIT_POLICY] = DEFAULT_WAIT_POLICY


def set_kernel_cache_default(environ: MutableMapping[str, str] = os.environ) -> None:
    """Give oneDNN's primitive cache room for a training run's shapes (:data:`DEFAULT_KERNEL_CACHE`) unless the user
    sized it. Takes effect only before oneDNN makes its first primitive in this process (and in those it starts)."""
    if not environ.get(KERNEL_CACHE):
        environ[KERNEL_CACHE] = DEFAULT_KERNEL_CACHE


def set_cpu_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Every default the command line sets before torch starts: threads that sleep when idle, and a kernel cache
    with room for a run's shapes."""
    set_thread_defaults(environ)
    set_kernel_cache_default(environ)


__all__ = ["DEFAULT_KERNEL_CACHE", "DEFAULT_WAIT_POLICY", "KERNEL_CACHE", "WAIT_POLICY", "set_cpu_defaults",
           "set_kernel_cache_default", "set_thread_defaults"]
