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
    lines = [*common.turns_header("The teacher's passes and the student's steps: bf16 or float32 on the CPU", rows),
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
    parser = common.arms_parser(__doc__.split("\n\n")[0], arms=ARMS, samples=6400, results=RESULTS)
    parser.add_argument("--teacher", type=Path, required=True)
    args = parser.parse_args(argv)
    args.arms = args.arms.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    print(common.arms_in_turns(args, argv, lambda arm: run_once(arm, args), lambda rows: report(rows, args)))


if __name__ == "__main__":
    main()
