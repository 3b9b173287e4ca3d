"""What the Fisher information costs ``ghostify importance``: wall time, CPU time and peak memory of the command
on a real model, against another checkout of ghostify (the one before issue 37 computed only the first-order
scores), in fresh processes taking turns.

    git worktree add /tmp/ghostify-before e8c482a
    python benchmarks/importance_cost.py --baseline /tmp/ghostify-before --model ../shared/models/all-MiniLM-L6-v2 \\
        --dataset ../shared/data/glue --task sst2 --samples 2048 --repeats 3

Each run is ``ghostify importance MODEL -o TMP ...`` imported from the checkout (``PYTHONPATH``, ahead of an
editable install's finder), one torch thread (``OMP_NUM_THREADS=1``); peak resident memory from
``getrusage(RUSAGE_CHILDREN)`` of a wrapper process.
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

REPO = Path(__file__).resolve().parent.parent

#: ``python -m ghostify`` from the checkout on ``PYTHONPATH``: an editable install's import finder (on
#: ``sys.meta_path``, ahead of ``PYTHONPATH``) would otherwise import the installed checkout whatever the path says
RUNNER = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.argv[0] = "ghostify"
runpy.run_module("ghostify", run_name="__main__", alter_sys=True)
"""

#: runs one command in a child and prints its wall time, CPU time and the child's peak RSS (KiB) as JSON
WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss}))
"""


def run_once(checkout: Path, args: argparse.Namespace, out: Path) -> dict:
    command = [sys.executable, "-c", WRAPPER, sys.executable, "-c", RUNNER, "importance", str(args.model.resolve()),
               "-o", str(out), "--dataset", str(args.dataset.resolve()), "--task", args.task, "--samples", str(args.samples)]
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # the working directory is the first entry of a `python -c` child's path: not the repository's, whose ghostify
    # would shadow the checkout's
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=out.parent)
    row = json.loads(result.stdout.strip().splitlines()[-1])
    if row["code"] != 0:
        raise SystemExit(f"{checkout}: importance failed:\n{result.stderr[-2000:]}")
    row["scores_bytes"] = (out / "importance.safetensors").stat().st_size
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", type=Path, required=True, help="a checkout of ghostify to compare with")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--task", default="sst2")
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    info = common.machine_info()
    checkouts = {"baseline": args.baseline.resolve(), "this": REPO}
    rows: dict[str, list[dict]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))  # taking turns
            for name in order:
                row = run_once(checkouts[name], args, Path(tmp) / f"{name}-{r}")
                common.stderr_log(f"[{r + 1}/{args.repeats}] {name}: {row}")
                rows[name].append(row)
    common.finish_info(info)
    med = {name: {k: statistics.median(row[k] for row in rs) for k in ("wall", "cpu", "max_rss_kib", "scores_bytes")}
           for name, rs in rows.items()}
    table = [[name, f"{m['wall']:.1f}", f"{m['cpu']:.1f}", f"{m['max_rss_kib'] / 1024:.0f}",
              f"{m['scores_bytes'] / 1e6:.2f}"] for name, m in med.items()]
    table.append(["this / baseline", f"{med['this']['wall'] / med['baseline']['wall']:.2f}x",
                  f"{med['this']['cpu'] / med['baseline']['cpu']:.2f}x",
                  f"{med['this']['max_rss_kib'] / med['baseline']['max_rss_kib']:.2f}x", ""])
    print(f"Machine: {common.machine_line(info)}\n")
    print(f"`ghostify importance` on {args.model.name}, {args.task}, {args.samples} examples, 1 thread, medians of "
          f"{args.repeats} runs per checkout (taking turns)\n")
    print(common.markdown_table(["checkout", "wall s", "CPU s", "peak RSS MiB", "scores file MB"], table))
    common.write_json(args.json, {"machine": info, "rows": rows, "medians": med})


if __name__ == "__main__":
    main()
