"""Which precision trains a pruned student fastest on the CPU, the teacher's passes and the student's steps apart
(issue 46: ``compress --budget`` times both at each stage and runs each in the faster).

Each arm runs one ``ghostify`` training command on the same examples in a fresh process, the arms taking turns,
and reports the training loop's seconds per example (``training.json``: without loading and evaluation), the
process's peak memory and the validation score. An arm is ``COMMAND:STUDENT/TEACHER``:

- ``distill:bf16/bf16``: a distillation from the teacher, everything in bf16 (what ``compress`` did before);
- ``distill:no/bf16``: the student's steps in float32, the teacher's passes in bf16 (``--teacher-precision``);
- ``distill:no/no``: everything in float32;
- ``finetune:bf16`` and ``finetune:no``: the student's labelled fine-tune alone (no teacher: its logits are
  read back in compress, at the same cost in both precisions).

A distillation here reads each text once, so the teacher runs at every step: the cost of a text's first visit in a
compress run (less storing its outputs). ::

    python benchmarks/training_precision.py --work /tmp/tp --student RUN/stages/09-prune-2 --teacher TEACHER \\
        --dataset ../shared/data/glue --task sst2

Every finished run is a line of ``WORK/rows.jsonl``: a cut-off invocation goes on where it stopped,
``--report-only`` writes the report from the lines again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "training_precision.md"
ARMS = "distill:bf16/bf16,distill:no/bf16,distill:no/no,finetune:bf16,finetune:no"


def command_of(arm: str, args: argparse.Namespace, out: Path) -> list[str]:
    """The ``ghostify`` command line of ``arm``."""
    command, precisions = arm.split(":")
    student, _, teacher = precisions.partition("/")
    model = ["--student", str(args.student), "--teacher", str(args.teacher)] if command == "distill" else \
        [str(args.student)]
    line = [sys.executable, "-m", "ghostify", command, *model, "-o", str(out), "--task", args.task,
            "--dataset", str(args.dataset), "--max-samples", str(args.samples), "--epochs", "1",
            "--mixed-precision", student, "--dropout", "0", "--attention-dropout", "0",
            "--max-length", str(args.max_length), "--seed", "0"]
    if command == "distill":
        line += ["--teacher-precision", teacher, "--learning-rate", "2e-4"]
    else:
        line += ["--learning-rate", "1e-4"]
    return line


def run_once(arm: str, args: argparse.Namespace) -> dict:
    out = args.work / f"run-{arm.replace(':', '-').replace('/', '-')}"
    for leftover in (out, out.with_name(out.name + ".partial")):  # an interrupted invocation's
        shutil.rmtree(leftover, ignore_errors=True)
    load_before = os.getloadavg()[0]
    child = subprocess.Popen(command_of(arm, args, out), cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read() if child.stderr is not None else ""
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{arm} failed: {(stderr.strip().splitlines() or ['no output'])[-1]}")
    training = json.loads((out / "training.json").read_text())
    loop = sum(epoch["wall"] for epoch in training["epoch_seconds"])
    shutil.rmtree(out, ignore_errors=True)
    return {"arm": arm, "loop_s": loop, "ms_per_example": 1000 * loop / args.samples,
            "peak_rss_mb": usage.ru_maxrss / 1024, "score": training.get("best"), "load_before": load_before,
            "load_after": os.getloadavg()[0]}


def report(rows: list[dict], args: argparse.Namespace) -> str:
    lines = ["# The teacher's passes and the student's steps: bf16 or float32 on the CPU", "",
             "Command: " + ", ".join(f"`{c}`" for c in sorted({r["command"] for r in rows})), "",
             f"Machine: {'; '.join(sorted({r['machine'] for r in rows}))}; torch's default threads (one per logical "
             f"CPU), one run at a time, the arms taking turns; 1-minute load average before → after each run in the "
             f"last column. Commit: {', '.join(sorted({r['commit'] for r in rows}))}.", "",
             f"Workload: `{args.student}` on {args.samples:,} {args.task} training examples, one epoch (batch 32, "
             "padded to the longest text of each batch); a distillation runs the teacher at every step. Loop = the "
             "training loop's own clock.", "",
             "| arm (command:student/teacher) | loop ms an example | peak MB | score | load |", "|---|---|---|---|---|"]
    for arm in args.arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        each = ", ".join(f"{r['ms_per_example']:.2f}" for r in mine)
        memory = ", ".join(f"{r['peak_rss_mb']:.0f}" for r in mine)
        scores = ", ".join(sorted({f"{r['score']:.4f}" for r in mine if r["score"] is not None}))
        loads = "; ".join(f"{r['load_before']:.1f} → {r['load_after']:.1f}" for r in mine)
        median = statistics.median(r["ms_per_example"] for r in mine)
        lines.append(f"| {arm} | **{median:.2f}** ({each}) | {memory} | {scores} | {loads} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--samples", type=int, default=6400)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--arms", default=ARMS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="write the report from WORK/rows.jsonl")
    args = parser.parse_args(argv)
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    args.arms = args.arms.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    rows_file = args.work / "rows.jsonl"
    rows = common.read_rows(rows_file)
    turns = common.in_turns(args.arms, args.rounds)
    machine = common.machine_line(common.machine_info(), load=False)  # the runs' loads are each row's own
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    for k, arm in enumerate(turns if not args.report_only else []):
        if k < len(rows):  # measured by an earlier, cut-off invocation
            continue
        row = run_once(arm, args) | {"round": k // len(args.arms), "machine": machine, "commit": commit,
                                     "command": command}
        common.stderr_log(json.dumps(row))
        rows.append(row)
        common.append_row(rows_file, row)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report(rows, args))  # after every run: a cut-off run keeps its rows
    text = report(rows, args)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
