"""Where a command that does not go through Accelerate runs its models, and what its arithmetic is fast at."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

#: CPU flags (Linux's /proc/cpuinfo) of bfloat16 arithmetic in hardware: AVX-512 BF16 (AMD Zen 4 and later,
#: Intel Cooper Lake and Sapphire Rapids) and AMX (Intel Sapphire Rapids and later). Without them torch emulates
#: bfloat16 matrix products on the CPU, slower than float32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device``: a GPU runs kernels after they were queued, so a clock read without
    this wait measures the queueing, not the work (the CPU runs them as they come)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def fast_bf16() -> bool:
    """Whether training in bfloat16 is faster here than in float32: a GPU that supports it, or a CPU with
    bfloat16 instructions (:data:`BF16_FLAGS`)."""
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


def training_device_name() -> str:
    """What :func:`default_device` is, for reports: the GPU's name, else the CPU's."""
    device = default_device()
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA)"
    return cpu_name() or "the CPU"


def cpu_name() -> str:
    """The CPU's model name, for reports (empty where Linux does not say)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
