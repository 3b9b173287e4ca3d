"""Does a time budget keep its time when the machine slows after it was timed? (issue 46)

``ghostify compress MODEL --budget B`` plans its training stages from a throughput probe at the start; the stages
before the last are followed by plans made again from the time then left, but nothing after the last can absorb
the machine running slower than it was timed (this project's 2-core VMs move by a fifth from minute to minute, and
a neighbour's job can take a core). Since the deadline, the last training stage ends at the first step past the
time the rest of the run needs (``ghostify.training.loop.Deadline``).

Each run is one ``compress`` process (torch's default threads: every core), one at a time. ``--slow-last-stage``
starts a process that keeps one core busy the moment the last training stage starts (its ``*-final.partial``
directory appears) and stops it when that stage is written: the machine slowed after the plan, and only then.
``--code DIR`` runs another checkout (``PYTHONPATH=DIR``; e.g. a worktree of the commit before the deadline).
Every finished run is a row of ``WORK/deadline.jsonl`` (a label runs once); the markdown table of every row goes
to ``--output``, between its ``<!-- table -->`` and ``<!-- end table -->`` lines where it has them (the reading
written below the table stays).

    python benchmarks/time_budget_deadline.py --work /work/runs/deadline --label quiet
    python benchmarks/time_budget_deadline.py --work /work/runs/deadline --label slowed --slow-last-stage
    python benchmarks/time_budget_deadline.py --work /work/runs/deadline --label slowed-before --slow-last-stage \\
        --code /work/wt-bench --output benchmarks/results/time_budget_deadline.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_row, finish_info, machine_info, machine_line, markdown_table, read_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: the default run: the sentence-embedding task has no labelled fine-tune, so its last distillation is the last stage
DEFAULT_ARGS = [str(SHARED / "models" / "all-MiniLM-L6-v2"), "--task", "embeddings", "--dataset",
                str(SHARED / "data" / "glue" / "stsb"), "--text-columns", "sentence1,sentence2", "--speedup", "2",
                "--seed", "0"]


def _git_rev(directory: Path) -> str:
    out = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


class _LastStageLoad:
    """A process that keeps one core busy while the last training stage of the run in ``stages`` trains."""

    def __init__(self, stages: Path) -> None:
        self.stages, self.done = stages, threading.Event()
        self.seconds: float | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _find(self, suffix: str) -> bool:
        return self.stages.is_dir() and any(p.name.endswith(suffix) for p in self.stages.iterdir())

    def _watch(self) -> None:
        while not self.done.is_set() and not self._find("-final.partial"):
            time.sleep(0.5)
        if self.done.is_set():
            return
        started = time.monotonic()
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            while not self.done.is_set() and self._find("-final.partial"):
                time.sleep(0.5)
        finally:
            busy.kill()
            busy.wait()
            self.seconds = time.monotonic() - started

    def __enter__(self) -> _LastStageLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def _final_training(out: Path) -> dict[str, Any]:
    """The last training stage's steps, where a deadline stopped it, and its wall time."""
    stages = out / "stages"
    final = next((p for p in stages.iterdir() if p.is_dir() and p.name.endswith("-final")), None)
    run = json.loads((final / "training.json").read_text()) if final is not None else {}
    report = json.loads((out / "report.json").read_text())
    walls = report.get("time", {}).get("stages", {})
    return {"steps": run.get("steps"), "stopped_at": run.get("stopped_at"), "schedule_steps": run.get("schedule_steps"),
            "final_wall": walls.get(final.name) if final is not None else None}


def run_once(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    code = Path(args.code).resolve() if args.code else REPO
    out = work / args.label
    command = [sys.executable, "-m", "ghostify", "compress", *(args.compress_args or DEFAULT_ARGS), "-o", str(out),
               "--budget", args.budget]
    env = {**os.environ, "PYTHONPATH": str(code)}
    info = machine_info()
    started = time.monotonic()
    with _LastStageLoad(out / "stages") if args.slow_last_stage else contextlib.nullcontext() as load:
        result = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True)
    wall = time.monotonic() - started
    finish_info(info)
    (work / f"{args.label}.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise SystemExit(f"compress failed ({result.returncode}); see {work / f'{args.label}.log'}")
    report = json.loads((out / "report.json").read_text())
    timing = report["time"]
    shipped = report.get("shipped_metrics") or report["metrics"]
    metric = report.get("main_metric") or next(iter(shipped))
    return {"label": args.label, "code": _git_rev(code), "budget_seconds": timing["budget_seconds"],
            "seconds": timing["seconds"], "wall": wall, "planned": timing.get("planned", {}),
            "slowed_seconds": getattr(load, "seconds", None), **_final_training(out), "metric": metric,
            "shipped": shipped.get(metric), "measured": report.get("measured_speedup"),
            "machine": f"{machine_line(info)}; CPU flags {cpu_flags()}", "command": " ".join(command[1:])}


TABLE_START, TABLE_END = "<!-- table -->", "<!-- end table -->"


def cpu_flags() -> str:
    """The CPU's fast-arithmetic flags (the same model name covers AVX2-only and AVX-512 machines here)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
    return ", ".join(f for f in wanted if f in flags.split()) or "none of avx2/avx512"


def write_output(path: Path, rows: list[dict[str, Any]]) -> None:
    """The table of ``rows`` in ``path``, between its markers where it has them (the rest of the file kept)."""
    block = f"{TABLE_START}\n{table(rows)}{TABLE_END}\n"
    text = path.read_text() if path.is_file() else ""
    if TABLE_START in text and TABLE_END in text:
        head, rest = text.split(TABLE_START, 1)
        after = rest.split(TABLE_END, 1)[1].lstrip("\n")
        block = head + block + ("\n" + after if after else "")
    elif text:
        block = text.rstrip("\n") + "\n\n" + block
    else:
        block = "# A time budget's deadline for its last training stage (issue 46)\n\n" + block
    path.write_text(block)


def table(rows: list[dict[str, Any]]) -> str:
    headers = ["run", "code", "last stage slowed", "last stage: steps (planned)", "its wall s", "compress's clock",
               "shipped", "measured"]
    body = []
    for r in rows:
        stop = f"{r['steps']} (stopped at the deadline, of {r['schedule_steps']})" if r.get("stopped_at") else \
            f"{r['steps']}"
        off = 100 * (r["seconds"] / r["budget_seconds"] - 1)
        slowed = f"one core busy, {r['slowed_seconds']:.0f} s" if r.get("slowed_seconds") else "no"
        body.append([r["label"], r["code"], slowed, stop, f"{r['final_wall']:.0f}" if r.get("final_wall") else "-",
                     f"{r['seconds']:.0f} s of {r['budget_seconds']:.0f} ({off:+.1f}%)",
                     f"{r['metric']} {r['shipped']:.3f}" if r.get("shipped") is not None else "-",
                     f"{r['measured']:.2f}x" if r.get("measured") else "-"])
    lines = ["`python benchmarks/time_budget_deadline.py` (its docstring says what each run is). One run at a time.",
             "", markdown_table(headers, body), ""]
    lines += [f"- {r['label']}: `{r['command']}`; {r['machine']}" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="where the runs and deadline.jsonl go")
    parser.add_argument("--label", required=True, help="the run's name (a label already in deadline.jsonl is skipped)")
    parser.add_argument("--budget", default="10m")
    parser.add_argument("--slow-last-stage", action="store_true", help="keep one core busy while the last stage trains")
    parser.add_argument("--code", help="the checkout to run (default: this one)")
    parser.add_argument("--output", help="write the markdown table of every row here")
    parser.add_argument("compress_args", nargs="*", help="compress's arguments (default: STS-B embeddings at 2x)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows_file = work / "deadline.jsonl"
    if args.label not in {r["label"] for r in read_rows(rows_file)}:
        append_row(rows_file, run_once(args, work))
    if args.output:
        write_output(Path(args.output), read_rows(rows_file))


if __name__ == "__main__":
    main()
