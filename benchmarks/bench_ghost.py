"""Latency and memory overhead of the default ghost modules (k=3, softmax, ReLU, after O and FFN2).

BERT-base-sized encoders (random weights: speed does not depend on them) pruned by weight
magnitude to each width, each measured side by side with the same model plus ghost modules, on
CPU with 2 threads, batch 1 and 32, sequence 128, no padding, in ``torch.inference_mode``.

* Latency: one forward pass per measurement, the variants interleaved round-robin (the starting
  variant rotates each round) so that drifting machine load hits them alike; medians.
* Memory: the peak of live tensor storage during one forward pass (activations; the weights
  exist before and are excluded), counted by a TorchDispatchMode, so allocator caching and other
  processes do not blur it.
* ``naive``: the ghost modules with a textbook depthwise ``conv1d`` on a (batch, channels, seq)
  transpose of the projection output and back, instead of ghostify's channels-last view.
* ``--train-memory-batch N``: also the peak of one forward + backward pass at batch N.

Usage (results and their discussion: benchmarks/README.md, "Ghost modules"):
    python benchmarks/bench_ghost.py --json ghost.json                     # 2 threads, wall clock (~15 min)
    python benchmarks/bench_ghost.py --threads 1 --clock cpu --repeats 3   # 1 thread, CPU time: robust to other jobs
    python benchmarks/bench_ghost.py --repeats 0 --batch-sizes 1 --train-memory-batch 8   # memory only
    python benchmarks/bench_ghost.py --quick                               # smoke test: 2 layers, < 1 minute
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from ghostify.architectures import get_adapter
from ghostify.flops import count_flops
from ghostify.methods.ghost import GhostSettings, attach_ghosts, ghost_flops, ghost_params
from ghostify.methods.ghost import convs as ghost_convs
from ghostify.methods.pruning import magnitude_importance
from ghostify.methods.pruning.apply import dense_record, prune


def naive_conv_over_sequence(x: torch.Tensor, weight: torch.Tensor, *, groups: int, padding: int) -> torch.Tensor:
    """The textbook layout: (batch, seq, C) -> (batch, C, seq) -> conv1d -> back."""
    return F.conv1d(x.transpose(1, 2), weight, padding=padding, groups=groups).transpose(1, 2)


@contextlib.contextmanager
def naive_layout():
    fused = ghost_convs._conv_over_sequence
    ghost_convs._conv_over_sequence = naive_conv_over_sequence
    try:
        yield
    finally:
        ghost_convs._conv_over_sequence = fused


class PeakMemory(TorchDispatchMode):
    """Peak bytes of tensor storage created during the ``with`` block and still alive."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]
        # an output that shares an input's storage (a view, an in-place op) allocated nothing
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                key = storage._cdata
                if key not in self.live and key not in inputs:
                    self.live[key] = (StorageWeakRef(storage), storage.nbytes())
                    self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def build(width: Fraction, layers: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers), add_pooling_layer=False).eval()
    if width < 1:
        adapter = get_adapter(model.config)
        prune(model, dense_record(model, adapter), magnitude_importance(model, adapter), heads_width=width, ffn_width=width)
    ghosted = copy.deepcopy(model)
    attach_ghosts(ghosted, GhostSettings())
    return model, ghosted


def measure(widths: list[Fraction], batches: list[int], layers: int, repeats: int, seq: int, clock=time.perf_counter,
            scale_rounds: bool = True) -> list[dict]:
    """One row per (width, batch); ``repeats`` = 0 measures memory only (latency columns NaN)."""
    rows = []
    for width in widths:
        base, ghost = build(width, layers)
        flops = count_flops(base, seq_len=seq)
        with FlopCounterMode(display=False) as counter:
            ghost_total = count_flops(ghost, seq_len=seq)
        g_flops = ghost_flops(counter.get_flop_counts())
        assert ghost_total - flops == g_flops
        variants = {
            "base": (base, contextlib.nullcontext),
            "ghost": (ghost, contextlib.nullcontext),
            "naive": (ghost, naive_layout),
        }
        for batch in batches:
            inputs = {
                "input_ids": torch.randint(1000, 20000, (batch, seq), generator=torch.Generator().manual_seed(batch)),
                "attention_mask": torch.ones(batch, seq, dtype=torch.long),
            }
            times: dict[str, list[float]] = {name: [] for name in variants}
            memory: dict[str, int] = {}
            names = list(variants)
            with torch.inference_mode():
                for name, (model, layout) in variants.items():  # warm-up, and the memory pass
                    with layout():
                        model(**inputs)
                        with PeakMemory() as peak:
                            model(**inputs)
                    memory[name] = peak.peak
                # small batches are cheap: more rounds (up to 5x)
                rounds = min(5 * repeats, max(repeats, repeats * 32 // batch)) if scale_rounds else repeats
                for r in range(rounds):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        model, layout = variants[name]
                        with layout():
                            start = clock()
                            model(**inputs)
                            times[name].append(clock() - start)
            med = {name: statistics.median(t) * 1e3 if t else float("nan") for name, t in times.items()}
            rows.append(
                {
                    "width": _width_label(width),
                    "batch": batch,
                    "flops": flops,
                    "ghost_flops": g_flops,
                    "flop_ratio": g_flops / flops,
                    "ghost_params": ghost_params(ghost),
                    "base_ms": med["base"],
                    "ghost_ms": med["ghost"],
                    "naive_ms": med["naive"],
                    "latency_ratio": med["ghost"] / med["base"] - 1,
                    "naive_ratio": med["naive"] / med["base"] - 1,
                    "base_peak_mb": memory["base"] / 2**20,
                    "ghost_peak_mb": memory["ghost"] / 2**20,
                    "naive_peak_mb": memory["naive"] / 2**20,
                    "memory_ratio": memory["ghost"] / memory["base"] - 1,
                    "repeats": rounds,
                }
            )
            print(_row(rows[-1]), file=sys.stderr, flush=True)
    return rows


def training_memory(widths: list[Fraction], batch: int, layers: int, seq: int) -> list[dict]:
    """Peak tensor memory of one forward + backward pass (activations kept for backward,
    temporaries and parameter gradients), base vs ghost."""
    rows = []
    for width in widths:
        base, ghost = build(width, layers)
        inputs = {
            "input_ids": torch.randint(1000, 20000, (batch, seq), generator=torch.Generator().manual_seed(batch)),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        }
        peaks = {}
        for name, model in (("base", base), ("ghost", ghost)):
            model.train()
            for measured in (False, True):  # the first pass allocates lazily created state
                with PeakMemory() if measured else contextlib.nullcontext() as peak:
                    model(**inputs).last_hidden_state.float().pow(2).mean().backward()
                model.zero_grad(set_to_none=True)
            peaks[name] = peak.peak / 2**20
        rows.append({"width": _width_label(width), "batch": batch, "base_mb": peaks["base"], "ghost_mb": peaks["ghost"]})
        print(f"| {rows[-1]['width']} | {batch} | {peaks['base']:.1f} | {peaks['ghost']:.1f} "
              f"({100 * (peaks['ghost'] / peaks['base'] - 1):+.1f}%) |", file=sys.stderr, flush=True)
    return rows


def _width_label(width: Fraction) -> str:
    return f"{int(width * 12)}/12"


HEADER = (
    "| width | batch | FLOPs | ghost FLOPs (+%) | base ms | ghost ms (+%) | naive-layout ghost ms (+%) "
    "| peak activations base MB | ghost MB (+%) |\n|---|---|---|---|---|---|---|---|---|"
)


def _row(r: dict) -> str:
    return (
        f"| {r['width']} | {r['batch']} | {r['flops'] / 1e9:.2f}G | {r['ghost_flops'] / 1e6:.2f}M ({100 * r['flop_ratio']:+.2f}%) "
        f"| {r['base_ms']:.1f} | {r['ghost_ms']:.1f} ({100 * r['latency_ratio']:+.1f}%) "
        f"| {r['naive_ms']:.1f} ({100 * r['naive_ratio']:+.1f}%) "
        f"| {r['base_peak_mb']:.1f} | {r['ghost_peak_mb']:.1f} ({100 * r['memory_ratio']:+.1f}%) |"
    )


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers, batch 1 and 8, 3 rounds (< 1 minute)")
    parser.add_argument("--widths", default="12/12,6/12,3/12,1/12")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds at batch 32 (smaller batches get more, up to 5x); 0: memory only")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: elapsed time; cpu: this process's CPU time, which other processes on the machine "
                        "barely affect (use with --threads 1: with more, idle threads spin and count)")
    parser.add_argument("--train-memory-batch", type=int, default=0,
                        help="also measure the peak memory of forward + backward at this batch size (0: no)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    widths = [Fraction(w) for w in args.widths.split(",")]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    layers, repeats = 12, args.repeats
    if args.quick:
        layers, repeats, batches = 2, 3, [1, 8]  # a smoke test of the script, not a measurement
    print(f"# {_cpu()}; BERT-base-sized ({layers} layers), seq {args.seq_len}, {args.threads} threads, torch {torch.__version__}, "
          f"{args.clock} clock, interleaved rounds (batch 32: {repeats}), medians; load average before: {_load()}", file=sys.stderr)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = measure(widths, batches, layers, repeats, args.seq_len, clock, scale_rounds=not args.quick)
    print(f"<!-- load average after: {_load()} -->")
    print(HEADER)
    for r in rows:
        print(_row(r))
    train_rows = []
    if args.train_memory_batch:
        train_rows = training_memory(widths, args.train_memory_batch, layers, args.seq_len)
        print("\n| width | batch | training peak base MB | ghost MB (+%) |\n|---|---|---|---|")
        for r in train_rows:
            print(f"| {r['width']} | {r['batch']} | {r['base_mb']:.1f} | {r['ghost_mb']:.1f} "
                  f"({100 * (r['ghost_mb'] / r['base_mb'] - 1):+.1f}%) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"inference": rows, "training_memory": train_rows}, f, indent=2)


if __name__ == "__main__":
    main()
