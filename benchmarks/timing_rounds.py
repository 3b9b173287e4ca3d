"""How many rounds a speed-up check needs on this machine: the same two models (a dense and a compressed one, in
the runtime compress ships in) timed again and again, as compress's checks time them (taking turns, one thread,
CPU time), at each round count; how far the measured speed-up moves from one check to the next.

    python benchmarks/timing_rounds.py --dense DENSE_GRAPH --compressed SHIPPED_GRAPH --rounds 20 100 \\
        --repeats 8 [--others GRAPH ...] --output benchmarks/results/timing_rounds.md

``--others``: more models that take turns in every round, untimed for the result (compress's last check times the
dense model in every installed runtime beside the two): whether their company moves the two models' times.

Each check's speed-up is read two ways: the ratio of the two medians (what ``compress`` reports) and the median of
the per-round ratios (each round's dense time over the compressed time of the same round). The round counts take
turns too, repeat by repeat, so that a busier stretch of the machine falls on all of them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

from ghostify.steps.bench import runner_for, take_turns  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dense", required=True, help="the dense model as shipped (a graph file or a checkpoint)")
    parser.add_argument("--compressed", required=True, help="the compressed model, the same way")
    parser.add_argument("--rounds", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--repeats", type=int, default=8, help="checks per round count")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--others", nargs="*", default=[], help="models that take turns with the two, as in "
                        "compress's last check (the dense model in the other runtimes)")
    parser.add_argument("--output", type=Path)
    return parser.parse_args(argv)


def check(runs, rounds: int, warmup: int) -> dict[str, float]:
    """One speed-up check: the ratio of the CPU medians, and the median of the per-round ratios."""
    start = time.perf_counter()
    _, cpu = take_turns(runs, rounds=rounds, warmup=warmup)
    dense, compressed = cpu[:2]
    dense_ms, compressed_ms = statistics.median(dense), statistics.median(compressed)
    return {"dense_ms": dense_ms, "compressed_ms": compressed_ms, "ratio_of_medians": dense_ms / compressed_ms,
            "median_of_ratios": statistics.median(d / c for d, c in zip(dense, compressed)),
            "seconds": time.perf_counter() - start}


def summary(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f}x ± {sd:.2f} ({100 * sd / mean:.1f}%), {min(values):.2f}–{max(values):.2f}x"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    common.set_threads(args.threads)
    info = common.machine_info()
    pair = [runner_for(m, 1, args.seq_len, args.threads)[1] for m in (args.dense, args.compressed)]
    company = [runner_for(m, 1, args.seq_len, args.threads)[1] for m in args.others]
    arms = {"alone": pair, "with the others": pair + company} if company else {"alone": pair}
    checks: dict[tuple[str, int], list[dict[str, float]]] = {(a, r): [] for a in arms for r in args.rounds}
    for repeat in range(args.repeats):
        for arm, runs in arms.items():
            for rounds in args.rounds:
                checks[arm, rounds].append(check(runs, rounds, args.warmup))
        common.stderr_log(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(
            f"{a} {r} rounds {c[-1]['ratio_of_medians']:.2f}x" for (a, r), c in checks.items()))
    common.finish_info(info)
    rows = [[a, r, summary([c["ratio_of_medians"] for c in cs]), summary([c["median_of_ratios"] for c in cs]),
             f"{statistics.median(c['dense_ms'] for c in cs):.2f} / {statistics.median(c['compressed_ms'] for c in cs):.2f}",
             f"{statistics.median(c['seconds'] for c in cs):.1f}"] for (a, r), cs in checks.items()]
    text = "\n".join([
        f"<!-- written by: python benchmarks/timing_rounds.py {' '.join(sys.argv[1:] if argv is None else argv)} -->",
        "# How many rounds a speed-up check needs", "",
        f"Dense `{args.dense}` against compressed `{args.compressed}`, batch 1 x {args.seq_len}, {args.threads} "
        f"thread(s), CPU time, {args.repeats} checks per round count (taking turns); each cell: the mean speed-up "
        "over the checks ± their standard deviation (as a share of the mean), and the lowest and highest check.", "",
        (f"Others taking turns in the second arm: {', '.join(f'`{m}`' for m in args.others)}." if args.others
         else "No other model took turns."), "",
        common.markdown_table(["models", "rounds per check", "ratio of medians (compress's)",
                               "median of per-round ratios", "dense / compressed CPU ms (median check)",
                               "seconds per check"], rows), "",
        f"Machine: {common.machine_line(info)}.", ""])
    print(text)
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
