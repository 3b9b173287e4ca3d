"""What oneDNN's primitive cache costs a student's fine-tune in bfloat16 on the CPU (issue 46).

torch's bfloat16 matrix products on the CPU go through oneDNN, which makes a *primitive* (a kernel for one shape)
before it runs one and keeps the last ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` of them (1,024 by oneDNN's default). A
training run whose batches are padded to their longest text needs one for every length, every distinct layer width
(a pruned student's layers differ) and each of the forward and backward products: more than 1,024, so oneDNN makes
them again and again. float32 products go through torch's BLAS, which makes nothing per shape.

This runs ``ghostify finetune`` of a given student (the teacher's logits read back from a copy of a teacher store,
as compress's fine-tune does) once per arm and round, the arms taking turns, each in a fresh process, and reports per
arm: the training loop's seconds (``training.json``: without loading and evaluation) per example, how many primitives
oneDNN made and the milliseconds it spent making them (``ONEDNN_VERBOSE=profile_create``: one line per primitive
made, none per run), the process's peak memory, and the validation accuracy. An arm is ``PRECISION:CAPACITY``:
``bf16:1024`` is oneDNN's default cache, ``bf16:8192`` the command line's default since issue 46
(``ghostify/threads.py``), ``no:8192`` float32.

    python benchmarks/kernel_cache.py --work /tmp/kc --student C5/stages/08-distill --teacher TEACHER \\
        --teacher-store C5/stages/teacher-outputs --dataset ../shared/data/glue --task sst2

The student and store of the result in ``benchmarks/results/kernel_cache.md`` come from a 5-minute compress run
(``ghostify compress TEACHER -o C5 --speedup 6 --budget 5m --seed 0 --task sst2 --dataset ../shared/data/glue
--max-length 128``). The store is copied once into ``--work``: the runs never write the given one. Every finished
run is a line of ``WORK/rows.jsonl``: a cut-off invocation goes on where it stopped, ``--report-only`` writes the
report from the lines again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "kernel_cache.md"


def run_once(arm: str, args: argparse.Namespace, store: Path | None) -> dict:
    precision, capacity = arm.split(":")
    out = args.work / f"run-{arm.replace(':', '-')}"
    for leftover in (out, out.with_name(out.name + ".partial")):  # an interrupted invocation's
        shutil.rmtree(leftover, ignore_errors=True)
    command = [sys.executable, "-m", "ghostify", "finetune", str(args.student), "-o", str(out), "--task", args.task,
               "--dataset", str(args.dataset), "--max-samples", str(args.samples), "--epochs", "1",
               "--learning-rate", "1e-4", "--mixed-precision", precision, "--dropout", "0", "--attention-dropout", "0",
               "--max-length", str(args.max_length), "--seed", "0"]
    if args.teacher is not None:
        command += ["--teacher", str(args.teacher), "--teacher-weight", "0.5"]
    if store is not None:
        command += ["--teacher-store", str(store)]
    env = {**os.environ, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": capacity, "ONEDNN_VERBOSE": "profile_create"}
    load_before = os.getloadavg()[0]
    child = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    made, making_ms = 0, 0.0
    assert child.stdout is not None
    for line in child.stdout:  # oneDNN's verbose lines: "onednn_verbose,...,create:cache_miss,...,<ms>"
        if "create:cache_miss" in line:
            made += 1
            making_ms += float(line.rsplit(",", 1)[1])
    stderr = child.stderr.read() if child.stderr is not None else ""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{arm} failed: {(stderr.strip().splitlines() or ['no output'])[-1]}")
    training = json.loads((out / "training.json").read_text())
    loop = sum(epoch["wall"] for epoch in training["epoch_seconds"])
    row = {"arm": arm, "loop_s": loop, "ms_per_example": 1000 * loop / args.samples, "primitives_made": made,
           "making_s": making_ms / 1000, "peak_rss_mb": usage.ru_maxrss / 1024, "accuracy": training.get("best"),
           "load_before": load_before, "load_after": os.getloadavg()[0]}
    shutil.rmtree(out, ignore_errors=True)
    return row


def report(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [*common.turns_header("oneDNN's primitive cache and a student's bfloat16 fine-tune", rows),
             f"Workload: `ghostify finetune` of `{args.student}` on {args.samples:,} {args.task} examples, one epoch "
             "(batch 32, padded to the longest text of each batch), teacher logits read back. Loop = the training "
             "loop's own clock; primitives made and the seconds making them from `ONEDNN_VERBOSE=profile_create`.",
             "", "| arm (precision:cache) | loop ms an example | primitives made | making s | peak MB | accuracy | "
             "load |", "|---|---|---|---|---|---|---|"]
    for arm in args.arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        cell = {k: ", ".join(f"{r[k]:{fmt}}" for r in mine)
                for k, fmt in (("ms_per_example", ".2f"), ("primitives_made", ",d"), ("making_s", ".1f"),
                               ("peak_rss_mb", ".0f"))}
        median = statistics.median(r["ms_per_example"] for r in mine)
        accuracy = ", ".join(sorted({f"{r['accuracy']:.4f}" for r in mine}))
        loads = "; ".join(f"{r['load_before']:.1f} → {r['load_after']:.1f}" for r in mine)
        lines.append(f"| {arm} | **{median:.2f}** ({cell['ms_per_example']}) | {cell['primitives_made']} | "
                     f"{cell['making_s']} | {cell['peak_rss_mb']} | {accuracy} | {loads} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = common.arms_parser(__doc__.split("\n\n")[0], arms="bf16:1024,bf16:8192,no:8192", samples=9600,
                                results=RESULTS)
    parser.add_argument("--teacher", type=Path)
    parser.add_argument("--teacher-store", type=Path, help="copied once into --work, then read by every run")
    args = parser.parse_args(argv)
    args.arms = args.arms.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    store = None
    if args.teacher_store is not None and not args.report_only:
        store = args.work / "teacher-store"
        if not store.exists():
            shutil.copytree(args.teacher_store, store)
    print(common.arms_in_turns(args, argv, lambda arm: run_once(arm, args, store), lambda rows: report(rows, args)))


if __name__ == "__main__":
    main()
