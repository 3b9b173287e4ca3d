"""What a distillation epoch costs once the teacher's outputs are stored (issue 46: "epochs after the first at
least 2x cheaper at 3x than today"), side by side in one run.

Two ``ghostify distill`` runs of the same student from the same teacher on the same texts, one process each, one
thread, one after the other: ``today`` with ``--teacher-store-gb 0`` (the teacher runs at every step, as before
issue 46) and ``stored`` (its first epoch runs the teacher and stores its outputs, later epochs read them back).
Each epoch's CPU seconds come from the run's ``training.json`` (CPU time, which leaves out the load of other jobs;
the evaluation after an epoch is not in it). The result: today's epoch (median) over the stored run's later
epochs (median).

    python benchmarks/epoch_cost.py --teacher T --student S --task conll2003 --dataset ../shared/data/conll2003 \\
        --samples 1024 --epochs 3 -- --tags-column ner_labels --max-length 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "epoch_cost.md"


def run(args, arm: str, work: Path) -> list[float]:
    """The CPU seconds of each epoch of one distillation (``arm``: today or stored)."""
    out = work / arm
    store = ["--teacher-store-gb", "0"] if arm == "today" else ["--teacher-store", str(work / "store")]
    command = [sys.executable, "-m", "ghostify", "distill", "--student", str(args.student), "--teacher",
               str(args.teacher), "-o", str(out), "--task", args.task, "--dataset", str(args.dataset),
               "--max-samples", str(args.samples), "--epochs", str(args.epochs), *store, *args.rest]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    common.stderr_log(" ".join(command))
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return [e["cpu"] for e in json.loads((out / "training.json").read_text())["epoch_seconds"]]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", type=Path, required=True)
    p.add_argument("--student", type=Path, required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("rest", nargs="*", help="more distill flags, after --")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be at least 2: the later epochs are what is measured")
    import torch

    torch.set_num_threads(1)  # as the runs it starts: the machine line says so
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="epoch-cost-") as tmp:
        today = run(args, "today", Path(tmp))
        stored = run(args, "stored", Path(tmp))
    ratio = statistics.median(today) / statistics.median(stored[1:])
    lines = ["# A distillation epoch with the teacher's outputs stored (issue 46)", "",
             f"`python benchmarks/epoch_cost.py {' '.join(sys.argv[1:])}`", "",
             f"Student {args.student}, teacher {args.teacher}, {args.samples:,} texts x {args.epochs} epochs, "
             "1 thread, CPU seconds per epoch (evaluation excluded):", "",
             "| run | epoch CPU seconds |", "|---|---|",
             f"| today (`--teacher-store-gb 0`: the teacher at every step) | {', '.join(f'{s:.1f}' for s in today)} |",
             f"| stored (the first epoch stores, later ones read back) | {', '.join(f'{s:.1f}' for s in stored)} |", "",
             f"Epochs after the first: **{ratio:.2f}x** cheaper than today's (median over median); the first "
             f"epoch costs {stored[0] / statistics.median(today):.2f}x today's (it also writes the store).", "",
             f"Machine: {common.machine_line(common.machine_info(), load=False)}; load average (1 min) "
             f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."]
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
