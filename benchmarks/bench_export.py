"""What the compression buys in the runtime users deploy with: PyTorch vs ONNX Runtime fp32 vs
ONNX Runtime int8, for a BERT-base-sized model dense and pruned to 6/12, 3/12 and 1/12, each with
and without ghost modules, side by side in one run.

Every model goes through the CLI's own code: a randomly initialised BERT-base-sized classifier
(speed does not depend on the weights) is pruned with ``ghostify prune`` (magnitude scores,
uniform allocation, heads = FFN width), ghosted with ``ghostify attach-ghost`` (the paper's
default: after O and FFN2, k=3) and exported with ``ghostify export --format onnx --quantize int8``
(which checks each graph against PyTorch). ``--ghost-op`` picks how the exports write the ghost
convolution: ``new`` (one ``Conv`` node, what ``ghostify export`` writes), ``old`` (k shifted
multiply-adds, the export of ghostify <= 0.22), or both side by side. Latency comes from
``ghostify bench``'s measurement (models take turns within each round; median): at 1 thread the
CPU time per forward pass, at 2 threads the wall clock, sequence 128, no padding. FLOPs from
``ghostify info``. "ghost cost" is a ghost model's latency over the same width and runtime without
ghosts, in the same column.

    python benchmarks/bench_export.py --work /tmp/bench-export            # full run (~30 min on 2 cores)
    python benchmarks/bench_export.py --work /tmp/bench-export --quick    # smoke test (2 layers)
    python benchmarks/bench_export.py --work /tmp/bench-export --widths 3/12 1/12 \\
        --runtimes onnx "onnx (int8)" --ghost-op old new                   # the ghost op's cost (~10 min)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

WIDTHS = ("12/12", "6/12", "3/12", "1/12")
RUNTIMES = ("pytorch", "onnx", "onnx (int8)")
#: --ghost-op: the export's ONNX_DEPTHWISE setting (ghostify.methods.ghost.modules)
GHOST_OPS = {"new": "conv", "old": "shifted"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the checkpoints and exports (reused)")
    p.add_argument("--rounds", type=int, nargs=2, default=(15, 3), metavar=("BATCH1", "BATCH32"))
    p.add_argument("--widths", nargs="+", choices=WIDTHS, default=list(WIDTHS))
    p.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES))
    p.add_argument("--ghost-op", nargs="+", choices=tuple(GHOST_OPS), default=["new"],
                   help="how the ONNX exports write the ghost convolution: new (one Conv), old (shifted multiply-adds)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batches", type=int, nargs="+", choices=(1, 32), default=[1, 32])
    p.add_argument("--quick", action="store_true", help="2 layers, 2 rounds: checks that the script runs")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    return p.parse_args(argv)


def build(work: Path, layers: int, widths: list[str]) -> dict[tuple[str, bool], Path]:
    """Checkpoint directory of every (width, ghosts), created once."""
    from ghostify import steps

    dense = work / "12-12"
    if not dense.is_dir():
        common.bert_base(layers=layers).save_pretrained(dense)
    paths = {}
    for width in widths:
        plain = dense if width == "12/12" else work / width.replace("/", "-")
        if not plain.is_dir():
            steps.prune(dense, plain, width=width)
        ghost = work / (plain.name + "-ghost")
        if not ghost.is_dir():
            steps.attach_ghost(plain, ghost)
        paths[(width, False)], paths[(width, True)] = plain, ghost
    return paths


def onnx_dir(path: Path, op: str | None) -> Path:
    """Where the export of ``path`` lives (one per ghost op for a ghost model)."""
    return path.with_name(path.name + "-onnx" + (f"-{op}" if op else ""))


def export(path: Path, op: str | None) -> None:
    """``ghostify export --format onnx --quantize int8`` with the ghost op ``op`` (once)."""
    from ghostify import steps
    from ghostify.methods.ghost import modules

    target = onnx_dir(path, op)
    if (target / "model_int8.onnx").is_file():
        return
    saved = modules.ONNX_DEPTHWISE
    modules.ONNX_DEPTHWISE = GHOST_OPS[op or "new"]
    try:
        result = steps.export(path, target, format="onnx", quantize="int8", overwrite=True)
    finally:
        modules.ONNX_DEPTHWISE = saved
    common.stderr_log(f"exported {target.name}: fp32 vs PyTorch {result['max_difference']:.1e}, "
                      f"int8 vs PyTorch {result['int8_difference']:.1e}")


def model_file(path: Path, op: str | None, runtime: str) -> Path:
    if runtime == "pytorch":
        return path
    return onnx_dir(path, op) / ("model.onnx" if runtime == "onnx" else "model_int8.onnx")


def variants(ghost_ops: list[str], runtime: str) -> list[str | None]:
    """None (no ghosts), then each ghost op; PyTorch has one ghost model whatever the export writes."""
    return [None, "new"] if runtime == "pytorch" else [None, *ghost_ops]


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    from ghostify import steps

    layers = 2 if args.quick else 12
    rounds = {1: 2, 32: 1} if args.quick else dict(zip((1, 32), args.rounds))
    info = common.machine_info()
    paths = build(args.work, layers, args.widths)
    order = [(w, op, r) for w in args.widths for r in args.runtimes for op in variants(args.ghost_op, r)]
    for w, op, r in order:
        if r != "pytorch":
            export(paths[(w, op is not None)], op)
    flops = {key: steps.info(path)["flops"] for key, path in paths.items()}
    files = [str(model_file(paths[(w, op is not None)], op, r)) for w, op, r in order]
    results = {}
    for batch in args.batches:
        for threads in args.threads:
            common.stderr_log(f"timing batch {batch}, {threads} thread(s), {rounds[batch]} rounds")
            rows = steps.bench(files, batch_size=batch, seq_len=128, threads=threads, rounds=rounds[batch], warmup=1)
            key = "cpu_median_ms" if threads == 1 else "median_ms"
            results[(batch, threads)] = {o: row[key] for o, row in zip(order, rows)}
    common.finish_info(info)
    print_report(args, info, order, flops, results)
    if args.json:
        common.write_json(args.json, {"machine": info, "flops": {f"{w} ghosts={g}": v for (w, g), v in flops.items()},
                                      "results": {f"b{b} t{t}": {f"{w} ghosts={op or 'no'} {r}": v for (w, op, r), v in times.items()}
                                                  for (b, t), times in results.items()}})


def print_report(args, info, order, flops, results) -> None:
    base = ("12/12", None, "pytorch")
    with_speedup = base in order
    headers = ["width", "ghosts", "runtime", "GFLOPs", "FLOP ratio"]
    for batch, threads in results:
        headers += [f"b{batch} {threads}t ms"] + (["speed-up"] if with_speedup else []) + ["ghost cost"]
    table = []
    dense_flops = flops.get(("12/12", False))
    for w, op, r in order:
        f = flops[(w, op is not None)]
        ghosts = "no" if op is None else "yes" if r == "pytorch" else f"yes, {op} op"
        row = [w, ghosts, r, f"{f / 1e9:.2f}", f"{dense_flops / f:.1f}x" if dense_flops else "-"]
        for times in results.values():
            t = times[(w, op, r)]
            row.append(f"{t:.1f}")
            if with_speedup:
                row.append(f"{times[base] / t:.1f}x")
            row.append("" if op is None else f"{100 * (t / times[(w, None, r)] - 1):+.1f}%")
        table.append(row)
    print(f"Machine: {common.machine_line(info)}\n")
    print("1 thread: CPU time per forward pass; 2 threads: wall clock. Speed-up against dense PyTorch fp32 "
          "in the same column; ghost cost against the same width and runtime without ghosts.\n")
    print(common.markdown_table(headers, table))
    b1 = results.get((1, 1), {})
    targets = [("3/12", "new", "onnx (int8)"), ("12/12", None, "onnx (int8)")]
    if base in b1 and targets[0] in b1:
        print("\nTargets (batch 1, 1 thread):")
        print(f"- 3/12 + ghosts, ONNX int8 vs dense PyTorch fp32: {b1[base] / b1[targets[0]]:.1f}x (target >= 9)")
        if targets[1] in b1:
            print(f"- 3/12 + ghosts, ONNX int8 vs dense ONNX int8: {b1[targets[1]] / b1[targets[0]]:.2f}x (target >= 2.4)")
    print("\nGhost cost (target <= 5% of the model without ghosts):")
    for (batch, threads), times in results.items():
        costs = [f"{w} {r} {op}: {100 * (times[(w, op, r)] / times[(w, None, r)] - 1):+.1f}%"
                 for w, op, r in order if op is not None and r != "pytorch"]
        print(f"- batch {batch}, {threads} thread(s): " + "; ".join(costs))


if __name__ == "__main__":
    main()
