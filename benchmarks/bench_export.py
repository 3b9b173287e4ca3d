"""What the compression buys in the runtime users deploy with: PyTorch vs ONNX Runtime fp32 vs
ONNX Runtime int8, for a BERT-base-sized model dense and pruned to 6/12, 3/12 and 1/12, each with
and without ghost modules, side by side in one run.

Every model goes through the CLI's own code: a randomly initialised BERT-base-sized classifier
(speed does not depend on the weights) is pruned with ``ghostify prune`` (magnitude scores,
uniform allocation, heads = FFN width), ghosted with ``ghostify attach-ghost`` (the paper's
default: after O and FFN2, k=3) and exported with ``ghostify export --format onnx --quantize int8``
(which checks each graph against PyTorch). Latency comes from ``ghostify bench``'s measurement
(models take turns within each round; median): at 1 thread the CPU time per forward pass, at 2
threads the wall clock, batch 1 and 32, sequence 128, no padding. FLOPs from ``ghostify info``.

    python benchmarks/bench_export.py --work /tmp/bench-export            # full run (~30 min on 2 cores)
    python benchmarks/bench_export.py --work /tmp/bench-export --quick    # smoke test (2 layers)
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the checkpoints and exports (reused)")
    p.add_argument("--rounds", type=int, nargs=2, default=(15, 3), metavar=("BATCH1", "BATCH32"))
    p.add_argument("--quick", action="store_true", help="2 layers, 2 rounds: checks that the script runs")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    return p.parse_args(argv)


def build(work: Path, layers: int) -> dict[tuple[str, bool], Path]:
    """Checkpoint directory of every (width, ghosts), created once."""
    from ghostify import steps

    dense = work / "12-12"
    if not dense.is_dir():
        common.bert_base(layers=layers).save_pretrained(dense)
    paths = {}
    for width in WIDTHS:
        plain = dense if width == "12/12" else work / width.replace("/", "-")
        if not plain.is_dir():
            steps.prune(dense, plain, width=width)
        ghost = work / (plain.name + "-ghost")
        if not ghost.is_dir():
            steps.attach_ghost(plain, ghost)
        paths[(width, False)], paths[(width, True)] = plain, ghost
    for path in paths.values():
        onnx = path.with_name(path.name + "-onnx")
        if not (onnx / "model_int8.onnx").is_file():
            result = steps.export(path, onnx, format="onnx", quantize="int8", overwrite=True)
            common.stderr_log(f"exported {path.name}: fp32 vs PyTorch {result['max_difference']:.1e}, "
                              f"int8 vs PyTorch {result['int8_difference']:.1e}")
    return paths


def models_of(path: Path) -> dict[str, Path]:
    onnx = path.with_name(path.name + "-onnx")
    return {"pytorch": path, "onnx": onnx / "model.onnx", "onnx (int8)": onnx / "model_int8.onnx"}


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    from ghostify import steps

    layers = 2 if args.quick else 12
    rounds = (2, 1) if args.quick else tuple(args.rounds)
    info = common.machine_info()
    paths = build(args.work, layers)
    flops = {key: steps.info(path)["flops"] for key, path in paths.items()}
    order = [(w, g, r) for w in WIDTHS for g in (False, True) for r in RUNTIMES]
    files = [str(models_of(paths[(w, g)])[r]) for w, g, r in order]
    results = {}
    for batch, batch_rounds in ((1, rounds[0]), (32, rounds[1])):
        for threads in (1, 2):
            common.stderr_log(f"timing batch {batch}, {threads} thread(s), {batch_rounds} rounds")
            rows = steps.bench(files, batch_size=batch, seq_len=128, threads=threads, rounds=batch_rounds, warmup=1)
            key = "cpu_median_ms" if threads == 1 else "median_ms"
            results[(batch, threads)] = {o: row[key] for o, row in zip(order, rows)}
    common.finish_info(info)

    base = ("12/12", False, "pytorch")
    headers = ["width", "ghosts", "runtime", "GFLOPs", "FLOP ratio"]
    for batch, threads in results:
        headers += [f"b{batch} {threads}t ms", "speed-up"]
    table = []
    for w, g, r in order:
        row = [w, "yes" if g else "no", r, f"{flops[(w, g)] / 1e9:.2f}", f"{flops[(base[0], False)] / flops[(w, g)]:.1f}x"]
        for key, times in results.items():
            row += [f"{times[(w, g, r)]:.1f}", f"{times[base] / times[(w, g, r)]:.1f}x"]
        table.append(row)
    print(f"Machine: {common.machine_line(info)}\n")
    print("Speed-up against dense PyTorch fp32 in the same column (1 thread: CPU time; 2 threads: wall clock).\n")
    print(common.markdown_table(headers, table))
    b1 = results[(1, 1)]
    print("\nTargets (batch 1, 1 thread):")
    print(f"- 3/12 + ghosts, ONNX int8 vs dense PyTorch fp32: {b1[base] / b1[('3/12', True, 'onnx (int8)')]:.1f}x (target >= 9)")
    print(f"- 3/12 + ghosts, ONNX int8 vs dense ONNX int8: "
          f"{b1[('12/12', False, 'onnx (int8)')] / b1[('3/12', True, 'onnx (int8)')]:.2f}x (target >= 2.4)")
    for key, times in results.items():
        costs = [f"{w} {r}: {100 * (times[(w, True, r)] / times[(w, False, r)] - 1):+.1f}%"
                 for w in WIDTHS for r in RUNTIMES[1:]]
        print(f"- ghost cost, batch {key[0]}, {key[1]} thread(s): " + "; ".join(costs))
    if args.json:
        common.write_json(args.json, {"machine": info, "flops": {f"{w} ghosts={g}": v for (w, g), v in flops.items()},
                                      "results": {f"b{b} t{t}": {f"{w} ghosts={g} {r}": v for (w, g, r), v in times.items()}
                                                  for (b, t), times in results.items()}})


if __name__ == "__main__":
    main()
