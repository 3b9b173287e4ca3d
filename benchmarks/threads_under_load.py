"""What torch's thread settings cost on a machine shared with other jobs (issue 39).

On a quiet 2-core machine the quickstart took 2:54 (285 s of user CPU); on the same kind of machine
shared with other jobs (load average 5–8) 26:44 with 919 s: three times the CPU for the same work.
This runs one fixed piece of that work — ``ghostify finetune`` of all-MiniLM-L6-v2 on 256 SST-2
training examples for one epoch (8 optimizer steps at batch 32, 64 tokens) and its evaluation on the
872 validation sentences — once per setting and round, the settings taking turns within each round,
each in a fresh process, and reports per setting:

* wall seconds and the CPU seconds (user + system) the run used (``getrusage`` of the child);
* cores used (CPU / wall) and how many cores *other* processes kept busy meanwhile (``/proc/stat``);
* the validation accuracy (the same within a thread count: the settings change waiting, not the sums).

The settings: torch's intra-op threads (``OMP_NUM_THREADS``), libgomp's wait policy
(``OMP_WAIT_POLICY`` unset, ``PASSIVE``, ``ACTIVE``; ``GOMP_SPINCOUNT``) and torch's inter-op threads.
torch's CPU wheel runs its parallel regions on GNU OpenMP (libgomp), which reads these variables
once, when torch is imported; each run's process therefore imports torch before anything else (and
before ghostify's own defaults, ``ghostify/threads.py``, could fill in a value), so "unset" really is
libgomp's built-in default. Then it calls the CLI's ``main`` with the finetune command line.

    OMP_NUM_THREADS=1 python benchmarks/threads_under_load.py --work /tmp/threads          # ~20 min here
    python benchmarks/threads_under_load.py --work /tmp/threads --settings 2-unset,2-passive --rounds 1
    python benchmarks/threads_under_load.py --work /tmp/threads --quick --output /tmp/t.md # smoke test

The result goes to ``benchmarks/results/threads_under_load.md`` with the command, the machine and the
load average before and after every run. ``--minilm`` and ``--glue`` default to ``../shared``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "threads_under_load.md"
SHARED = REPO.parent / "shared"

#: the variables a setting controls: every run starts with none of them, then sets its own
CONTROLLED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


@dataclass(frozen=True)
class Setting:
    name: str
    threads: int
    wait_policy: str | None = None  # OMP_WAIT_POLICY; None: unset (libgomp's default)
    spin_count: str | None = None  # GOMP_SPINCOUNT
    interop: int | None = None  # torch.set_num_interop_threads; None: torch's default (the core count)
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
        env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads), TOKENIZERS_PARALLELISM="false")
        if self.wait_policy:
            env["OMP_WAIT_POLICY"] = self.wait_policy
        if self.spin_count:
            env["GOMP_SPINCOUNT"] = self.spin_count
        return env

    def describe(self) -> tuple[str, str, str]:
        policy = self.wait_policy or "unset"
        if self.spin_count:
            policy += f", GOMP_SPINCOUNT={self.spin_count}"
        return str(self.threads), str(self.interop or "default"), policy


SETTINGS = {s.name: s for s in (
    Setting("2-unset", 2),  # torch's defaults on 2 cores: what ghostify did before issue 39
    Setting("2-passive", 2, "PASSIVE"),
    Setting("2-active", 2, "ACTIVE"),
    Setting("2-spin10k", 2, spin_count="10000"),
    Setting("2-passive-interop1", 2, "PASSIVE", interop=1),
    Setting("1-unset", 1),
)}

#: the run's process: torch first (libgomp reads the variables now), then the CLI
CHILD = """
import sys
import torch
interop = int(sys.argv[1])
if interop > 0:
    torch.set_num_interop_threads(interop)
from ghostify.cli.app import main
sys.exit(main(sys.argv[2:]))
"""


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib import metadata

    return (f"{model}, {os.cpu_count()} logical CPUs, torch {metadata.version('torch')}, "
            f"transformers {metadata.version('transformers')}, Python {platform.python_version()}")


def _busy_seconds() -> float:
    """Machine-wide busy CPU seconds so far (all processes)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def run_once(setting: Setting, args: argparse.Namespace, out: Path) -> dict:
    command = ["finetune", str(args.minilm), "-o", str(out), "--dataset", str(args.glue), "--task", "sst2",
               "--max-samples", str(args.samples), "--epochs", "1", "--max-length", "64",
               "--learning-rate", "1e-4", "--seed", "0", "--overwrite"]
    load_before = os.getloadavg()[0]
    children = os.times()
    busy = _busy_seconds()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD, str(setting.interop or 0), *command], env=setting.environment(),
                          cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - start
    busy = _busy_seconds() - busy
    after = os.times()
    cpu = (after.children_user - children.children_user) + (after.children_system - children.children_system)
    if done.returncode != 0:
        return {"setting": setting.name, "failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    accuracy = json.loads((out / "training.json").read_text()).get("best")
    return {"setting": setting.name, "wall_s": wall, "cpu_s": cpu, "cores_used": cpu / wall,
            "other_cores": max(0.0, busy - cpu) / wall, "accuracy": accuracy,
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def report(rows: list[dict], args: argparse.Namespace, machine: str, started: str,
           load: tuple[float, float]) -> str:
    lines = [
        "# torch threads on a shared machine",
        "",
        "Command: " + ", then ".join(f"`{c}`" for c in args.commands),
        "",
        f"Machine: {machine}; {started}; 1-min load average {load[0]:.2f} at the start, {load[1]:.2f} at the end "
        f"(other jobs shared the cores: see \"other cores busy\").",
        "",
        f"Workload: `ghostify finetune` of all-MiniLM-L6-v2 on {args.samples} SST-2 training examples, one epoch "
        f"(batch 32, 64 tokens), and its evaluation on the 872 validation sentences; a fresh process per run, "
        f"the settings taking turns within each of {len({r['round'] for r in rows})} round(s). CPU = user + system seconds of the "
        "run (getrusage); cores used = CPU / wall; other cores busy = the machine's busy CPU seconds less the "
        "run's, per wall second (/proc/stat). Medians over the rounds.",
        "",
        "| setting | torch threads | inter-op threads | OMP_WAIT_POLICY | wall s | CPU s | cores used | other cores busy | "
        "load before → after | accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting in SETTINGS.values():  # every setting measured: with --previous, the earlier invocation's too
        mine = [r for r in rows if r["setting"] == setting.name]
        if not mine:
            continue
        threads, interop, policy = setting.describe()
        med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "cpu_s", "cores_used", "other_cores")}
        walls = ", ".join(f"{r['wall_s']:.0f}" for r in mine)
        cpus = ", ".join(f"{r['cpu_s']:.0f}" for r in mine)
        loads = "; ".join(f"{r['load_before']:.1f} → {r['load_after']:.1f}" for r in mine)
        accuracy = ", ".join(sorted({f"{r['accuracy']:.4f}" for r in mine if r["accuracy"] is not None}))
        lines.append(f"| {setting.name} | {threads} | {interop} | {policy} | {med['wall_s']:.0f} ({walls}) | "
                     f"{med['cpu_s']:.0f} ({cpus}) | {med['cores_used']:.2f} | {med['other_cores']:.2f} | {loads} | "
                     f"{accuracy} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="where the runs write their checkpoints")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=256, help="training examples (batch 32)")
    parser.add_argument("--minilm", type=Path, default=SHARED / "models" / "all-MiniLM-L6-v2")
    parser.add_argument("--glue", type=Path, default=SHARED / "data" / "glue")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    parser.add_argument("--previous", type=Path, help="the --json of an earlier invocation: its rows count too, "
                        "and its start is the report's (more rounds after a cut-off run)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 32 examples, one round, two settings")
    args = parser.parse_args(argv)
    args.command_line = "python " + " ".join(shlex.quote(a) for a in [str(Path(sys.argv[0])), *(sys.argv[1:] if argv is None else argv)])
    if args.quick:
        args.samples, args.rounds, args.settings = 32, 1, "2-unset,2-passive"
    unknown = [s for s in args.settings.split(",") if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {', '.join(unknown)}; choose among {', '.join(SETTINGS)}")
    settings = [SETTINGS[s] for s in args.settings.split(",")]
    machine, started, load_start = _machine(), _dt.datetime.now().strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0]
    rows: list[dict] = []
    if args.previous:
        earlier = json.loads(args.previous.read_text())
        rows, started, load_start = earlier["rows"], earlier["started"], earlier["load_start"]
        args.commands = [*earlier.get("commands", []), args.command_line]
    else:
        args.commands = [args.command_line]
    first = max((r["round"] for r in rows), default=-1) + 1
    for round_ in range(first, first + args.rounds):
        order = settings[round_ % len(settings):] + settings[:round_ % len(settings)]  # who goes first rotates
        for setting in order:
            out = args.work / setting.name
            for attempt in range(3):  # a failed run (the tree being edited under it, say) is run again
                row = run_once(setting, args, out)
                if "failed" not in row:
                    break
                print(f"{setting.name} failed, run again in 60 s: {row['failed']}", file=sys.stderr, flush=True)
                time.sleep(60)
            else:
                raise SystemExit(f"{setting.name} failed 3 times: {row['failed']}")
            row["round"] = round_
            rows.append(row)
            shutil.rmtree(out, ignore_errors=True)
            print(f"round {round_ + 1}, {setting.name}: wall {row['wall_s']:.0f} s, CPU {row['cpu_s']:.0f} s, "
                  f"other cores busy {row['other_cores']:.2f}, load {row['load_before']:.1f} → {row['load_after']:.1f}",
                  file=sys.stderr, flush=True)
            text = report(rows, args, machine, started, (load_start, os.getloadavg()[0]))
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(text)  # after every run: a cut-off run keeps what it measured
            if args.json:
                args.json.write_text(json.dumps({"machine": machine, "started": started, "load_start": load_start,
                                                 "commands": args.commands, "rows": rows}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
