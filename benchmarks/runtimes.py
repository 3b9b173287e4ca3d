"""The runtime table (issue 47): one model in PyTorch and in every graph runtime ghostify exports to, on this machine.

The model is exported with ``ghostify export`` once per runtime (``--quantize int8`` too; a calibrated
int8 quantisation reads ``--calibration-samples`` examples of ``--task`` on ``--dataset``), then the
checkpoint and every graph run a batch of ``--batch-size`` x ``--seq-len`` random token ids on ``--threads``
threads, taking turns within each of ``--rounds`` rounds (``ghostify bench``'s timing, ``take_turns``):
medians and quartiles of CPU milliseconds per forward pass (on one thread, CPU time is the pass's own
work: what other processes take of the machine does not count), and wall-clock medians. A runtime whose
default arithmetic on this CPU is not fp32 (bf16 on CPUs with AVX-512 BF16 or AMX) is timed
twice: forced to fp32 and at its default. ``ghostify bench`` times the same graphs at their defaults;
the forced-fp32 rows are why this script exists.

``--accuracy`` also evaluates every graph on the task's validation split (``ghostify eval``): what each int8
path costs against fp32. ``--int8-variant SAMPLES[:GROUPS]`` adds a calibrated runtime's int8 graph again with
another calibration count and ``--keep-fp32`` groups (``--int8-variant 1000 --int8-variant 300:task-head``).

    OMP_NUM_THREADS=1 nice python benchmarks/runtimes.py --work /tmp/runtimes        # ~5 min on 2 cores
    python benchmarks/runtimes.py --work /tmp/runtimes --rounds 3 --output /tmp/r.md  # smoke test
    OMP_NUM_THREADS=1 nice python benchmarks/runtimes.py --work /tmp/rt-sst2 --model /work/runs/rf/sst2/run/01-teacher \
        --task sst2 --dataset ../shared/data/glue --accuracy                          # + SST-2 accuracy of each

Writes ``benchmarks/results/runtimes.md`` (and the same rows as ``runtimes.json``) with the command, the CPU
(model and whether it has the AVX-512 VNNI, AVX-512 BF16 and AMX flags), the threads, the versions and the load
average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

SHARED = HERE.parent.parent / "shared"
#: CPU flags that decide what int8 and bf16 kernels a runtime can use
FLAGS = ("avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "avx512f", "avx2")


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [f for f in FLAGS if f in present]
    except OSError:
        pass
    return []


def export_all(args: argparse.Namespace, work: Path) -> list[tuple[str, Path, str | None]]:
    """The checkpoint and every runtime's graphs of ``args.model``: (row name, model or graph file, forced
    precision) per row."""
    from ghostify import steps
    from ghostify.runtimes import graph_runtimes

    rows: list[tuple[str, Path, str | None]] = [("PyTorch fp32 (eager)", Path(args.model), None)]
    for runtime in graph_runtimes():
        if runtime.missing(export=True):
            print(f"skipping {runtime.title}: {', '.join(runtime.missing(export=True))} not installed", file=sys.stderr)
            continue
        out = work / runtime.name
        if not (out / (runtime.int8_graph or runtime.graph)).is_file():
            steps.export(args.model, out, format=runtime.name, quantize="int8" if runtime.int8_graph else None,
                         overwrite=True, **calibration(args, runtime, args.calibration_samples))
        reduced = runtime.reduced_precision()
        if reduced is not None:
            rows.append((f"{runtime.title} fp32 (forced)", out / runtime.graph, "f32"))
            rows.append((f"{runtime.title} {reduced} (its default here)", out / runtime.graph, None))
        else:
            rows.append((f"{runtime.title} fp32", out / runtime.graph, None))
        if runtime.int8_graph:
            what = runtime.int8_summary.split(':')[0].split(',')[0]
            read = f", {args.calibration_samples} examples" if runtime.calibrated else ""
            rows.append((f"{runtime.title} int8 ({what}{read})", out / runtime.int8_graph, None))
            for variant in args.int8_variant if runtime.calibrated else []:
                samples, _, groups = variant.partition(":")
                keep = tuple(g for g in groups.split(",") if g)
                name = f"{runtime.name}-int8-{samples}" + (f"-{'-'.join(keep)}" if keep else "")
                if not (work / name / runtime.int8_graph).is_file():
                    steps.export(args.model, work / name, format=runtime.name, quantize="int8", keep_fp32=keep or None,
                                 overwrite=True, **calibration(args, runtime, int(samples)))
                kept = f", {', '.join(keep)} kept fp32" if keep else ""
                rows.append((f"{runtime.title} int8 ({what}, {samples} examples{kept})", work / name / runtime.int8_graph,
                             None))
    return rows


def calibration(args: argparse.Namespace, runtime, samples: int) -> dict:
    """The export's calibration settings for ``runtime`` (none where its int8 is not calibrated)."""
    if not runtime.calibrated:
        return {}
    return dict(task=args.task, dataset=args.dataset, calibration_samples=samples,
                text_columns=tuple(args.text_columns.split(",")) if args.text_columns else None)


def accuracy(args: argparse.Namespace, rows: list[tuple[str, Path, str | None]]) -> list[dict | None]:
    """Each row's validation metrics (``ghostify eval``; a forced-precision row: None, its graph is evaluated at
    the runtime's default in the row beside it)."""
    from ghostify import steps
    from ghostify.settings import DataSettings

    data = DataSettings(task=args.task, dataset=args.dataset,
                        text_columns=tuple(args.text_columns.split(",")) if args.text_columns else None)
    found = []
    for name, graph, precision in rows:
        if precision is not None:
            found.append(None)
            continue
        print(f"evaluating {name}", file=sys.stderr, flush=True)
        found.append(steps.evaluate(graph, data=data))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="Where the exports go (kept: a second run times them again)")
    p.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    p.add_argument("--task", default="embeddings")
    p.add_argument("--dataset", default=str(SHARED / "data" / "glue" / "stsb"))
    p.add_argument("--text-columns", default=None, help="Default: the task's (sentence1,sentence2 for embeddings)")
    p.add_argument("--calibration-samples", type=int, default=300)
    p.add_argument("--int8-variant", action="append", default=[], metavar="SAMPLES[:GROUPS]",
                   help="A calibrated runtime's int8 graph again: SAMPLES calibration examples, GROUPS kept fp32")
    p.add_argument("--accuracy", action="store_true", help="Evaluate every graph on the task's validation split too")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--output", type=Path, default=HERE / "results" / "runtimes.md")
    args = p.parse_args(argv)
    if args.text_columns is None and args.task == "embeddings":
        args.text_columns = "sentence1,sentence2"

    import torch
    import transformers

    from ghostify.runtimes import graph_runtimes
    from ghostify.steps.bench import runner_for, take_turns

    load_before = os.getloadavg()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = export_all(args, args.work)
    torch.set_num_threads(args.threads)
    runs = [runner_for(graph, args.batch_size, args.seq_len, args.threads, precision=precision)[1]
            for _, graph, precision in rows]
    wall, cpu = take_turns(runs, rounds=args.rounds, warmup=args.warmup)
    load_after = os.getloadavg()
    metrics = accuracy(args, rows) if args.accuracy else [None] * len(rows)
    medians = [statistics.median(c) for c in cpu]
    named = {name: m for (name, _, _), m in zip(rows, medians)}
    pytorch = medians[0]
    ort_int8 = next((m for name, m in named.items() if name.startswith("ONNX Runtime int8")), pytorch)
    reference = next((m for m in metrics if m), None)  # PyTorch fp32's: what each int8 path costs against
    metric = next(iter(reference["metrics"])) if reference else None
    accuracy_columns = f" {metric} ({reference['samples']} {reference['split']}) | vs fp32 |" if reference else ""
    table = ["| graph | file | CPU ms (median) | p25-p75 | wall ms (median) | vs PyTorch | vs ONNX Runtime int8 |"
             + accuracy_columns,
             "|---|---|---|---|---|---|---|" + ("---|---|" if reference else "")]
    for (name, graph, _), c, w, m, found in zip(rows, cpu, wall, medians, metrics):
        q = statistics.quantiles(c, n=4)
        score = ""
        if reference:
            value, fp32 = (100 * found["metrics"][metric], 100 * reference["metrics"][metric]) if found else (0, 0)
            score = " - | - |" if found is None else f" {value:.2f} | {value - fp32:+.2f} |"
        table.append(f"| {name} | `{graph.parent.name}/{graph.name}` | {m:.2f} | {q[0]:.2f}-{q[2]:.2f} | "
                     f"{statistics.median(w):.2f} | {pytorch / m:.2f}x | {ort_int8 / m:.2f}x |{score}")
    versions = [f"torch {torch.__version__}", f"transformers {transformers.__version__}"]
    versions += [v for r in graph_runtimes() if not r.missing(export=True) for v in r.versions(True)]
    flags = cpu_flags()
    missing = [f for f in ("avx512_vnni", "avx512_bf16", "amx_tile") if f not in flags]
    text = "\n".join([
        "# Runtimes: one model in PyTorch and every graph runtime",
        "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} nice python benchmarks/runtimes.py "
        + " ".join(sys.argv[1:] if argv is None else argv) + "`",
        "",
        f"Machine: {common.cpu_model()}, {os.cpu_count()} logical CPUs; CPU flags present: {', '.join(flags) or 'none listed'}"
        + (f"; absent: {', '.join(missing)}" if missing else "")
        + ("" if "avx512_bf16" in flags or "amx_bf16" in flags else " (no bf16: every runtime computes fp32 here)")
        + f". {', '.join(versions)}. "
        f"1-min load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (other jobs shared the cores; on "
        "one thread CPU time leaves their share out).",
        "",
        f"Model: `{args.model}` ({args.task} export; the calibrated int8 graph read {args.calibration_samples} "
        f"training examples of `{Path(args.dataset).name}`). Batch {args.batch_size} x {args.seq_len} tokens, "
        f"{args.threads} thread(s), {args.rounds} interleaved rounds after {args.warmup} warm-up rounds; medians."
        + (f" Accuracy: `ghostify eval` of each graph on the {reference['samples']} {reference['split']} examples "
           "(points against PyTorch fp32)." if reference else ""),
        "",
        *table,
        "",
    ])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    # the same rows as data, beside it (benchmarks/picture.py draws them)
    common.write_json(args.output.with_suffix(".json"), {
        "command": text.split("Command: `", 1)[1].split("`", 1)[0], "cpu": common.cpu_model(), "flags": flags,
        "load_average": [load_before[0], load_after[0]], "model": args.model, "task": args.task,
        "batch_size": args.batch_size, "seq_len": args.seq_len, "threads": args.threads, "rounds": args.rounds,
        "rows": [{"name": name, "file": f"{graph.parent.name}/{graph.name}", "precision": precision,
                  "cpu_ms": m, "wall_ms": statistics.median(w), "metrics": (found or {}).get("metrics")}
                 for (name, graph, precision), w, m, found in zip(rows, wall, medians, metrics)]})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
