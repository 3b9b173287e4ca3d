"""CPU latency of grouped position-wise layers (``ghostify group-linear``) against the dense model.

A BERT-base-sized ``BertModel`` (random ``BertConfig()``, no pooler) and copies with the chosen
projections grouped (G = 2, 4, ...; qkv, ffn, qkv+ffn), each with and without the run-time gathers
that a ``--permute`` model adds on the residual-stream side (one shared by the inputs of Q, K and V,
FFN-up's input, FFN-down's output). The gathers use random channel orders: their cost does not depend on which order
(the permutation search itself is skipped, it only decides which order). All variants are
measured side by side in one run, interleaved round-robin (the first one rotating each round),
medians; FLOPs from ``ghostify.flops.count_flops`` (batch 1, seq 128).

Usage (results: benchmarks/README.md, "Grouped layers"):
    python benchmarks/bench_group_linear.py --threads 1 --clock cpu            # robust to other jobs
    python benchmarks/bench_group_linear.py --groups 2,4,8 --json gl.json
    python benchmarks/bench_group_linear.py --quick                            # smoke test, 2 layers
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_snapshot, finish_info, machine_info, machine_line, median, other_cores, write_json  # noqa: E402

from ghostify.architectures import get_adapter  # noqa: E402
from ghostify.flops import count_flops, count_params  # noqa: E402
from ghostify.methods.grouped.modules import _RUNTIME_INPUT, _RUNTIME_OUTPUT, GroupedLinear, share_qkv_gather
from ghostify.methods.grouped.settings import MODULES


def grouped_copy(model, groups: int, modules: list[str], gathers: bool, seed: int = 0):
    """``model`` with the chosen projections grouped from their diagonal blocks; ``gathers``: with
    random residual-stream orders (index gathers at run time), as a ``--permute`` model has."""
    model = copy.deepcopy(model)
    adapter = get_adapter(model.config)
    g = torch.Generator().manual_seed(seed)
    for layer in adapter.layers(model):
        paths = adapter.paths_for_layer(layer)
        qkv_order = torch.randperm(adapter.hidden_size(model.config), generator=g)  # Q, K, V share theirs
        for name in modules:
            for attr in MODULES[name]:
                linear = adapter.submodule(layer, getattr(paths, attr))
                inp = None
                if gathers and attr in _RUNTIME_INPUT:
                    inp = qkv_order if name == "qkv" else torch.randperm(linear.in_features, generator=g)
                out = torch.randperm(linear.out_features, generator=g) if gathers and attr in _RUNTIME_OUTPUT else None
                adapter.set_submodule(layer, getattr(paths, attr), GroupedLinear.from_linear(linear, groups, input_order=inp, output_order=out))
        share_qkv_gather(adapter, layer, paths)  # one gather for Q, K and V, as group_linear does
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="2,4")
    parser.add_argument("--modules", default="qkv;ffn;qkv,ffn", help="module sets separated by ';'")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="rounds at batch 32 (batch 1 gets 5x)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time, barely affected by other processes (use with --threads 1)")
    parser.add_argument("--quick", action="store_true", help="2 layers, batch 1 and 4, 2 rounds")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    layers = 2 if args.quick else 12
    batches = [1, 4] if args.quick else [int(b) for b in args.batch_sizes.split(",")]
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    dense = BertModel(BertConfig(num_hidden_layers=layers), add_pooling_layer=False).eval()
    variants = {"dense": dense}
    for groups in (int(g) for g in args.groups.split(",")):
        for modules in args.modules.split(";"):
            for gathers in (False, True):
                name = f"G={groups} {modules}" + (" +gathers" if gathers else "")
                variants[name] = grouped_copy(dense, groups, modules.split(","), gathers)
    flops = {name: count_flops(m, seq_len=args.seq_len) for name, m in variants.items()}
    params = {name: count_params(m) for name, m in variants.items()}
    info = machine_info()
    print(f"# {machine_line(info)}; {layers} layers, seq {args.seq_len}, {args.clock} clock", file=sys.stderr, flush=True)
    rows, load = [], {}
    for batch in batches:
        inputs = {
            "input_ids": torch.randint(1000, 20000, (batch, args.seq_len), generator=torch.Generator().manual_seed(batch)),
            "attention_mask": torch.ones(batch, args.seq_len, dtype=torch.long),
        }
        rounds = 2 if args.quick else (args.repeats * 5 if batch == 1 else args.repeats)
        names = list(variants)
        times: dict[str, list[float]] = {n: [] for n in names}
        start = cpu_snapshot()
        with torch.inference_mode():
            for name in names:  # warm-up
                variants[name](**inputs)
            for r in range(rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    t0 = clock()
                    variants[name](**inputs)
                    times[name].append(clock() - t0)
        load[batch] = other_cores(start, cpu_snapshot())
        base = median(times["dense"])
        for name in names:
            ms = median(times[name]) * 1e3
            rows.append({"variant": name, "batch": batch, "params": params[name], "flops": flops[name],
                         "flop_ratio": flops["dense"] / flops[name], "ms": ms, "speedup": base * 1e3 / ms, "rounds": rounds})
            print(f"  batch {batch} {name}: {ms:.1f} ms ({base * 1e3 / ms:.2f}x)", file=sys.stderr, flush=True)
    finish_info(info)
    print(f"machine: {machine_line(info)}; other processes kept "
          + ", ".join(f"{v:.2f} cores busy during batch {b}" for b, v in load.items()))
    print("\n| variant | params (M) | GFLOPs | FLOP ratio | " + " | ".join(f"b{b} ms | b{b} speed-up" for b in batches) + " |")
    print("|---|---|---|---|" + "---|---|" * len(batches))
    for name in variants:
        cells = [r for r in rows if r["variant"] == name]
        print(f"| {name} | {params[name] / 1e6:.1f} | {flops[name] / 1e9:.2f} | {cells[0]['flop_ratio']:.2f}x | "
              + " | ".join(f"{c['ms']:.1f} | {c['speedup']:.2f}x" for c in cells) + " |")
    write_json(args.json, {"machine": info, "rows": rows, "other_cores": load})


if __name__ == "__main__":
    main()
