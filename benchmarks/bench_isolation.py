"""Do models timed side by side in one ``ghostify bench`` process slow each other down? One int8
export alone and taking turns with other int8 exports, at 1 and 2 threads, with ONNX Runtime's
worker threads spinning between runs (ORT's default) or sleeping (what ``bench`` does).

    python benchmarks/bench_isolation.py /tmp/bench-export/3-12-onnx/model_int8.onnx \\
        /tmp/bench-export/*-onnx*/model_int8.onnx          # the exports of bench_export.py

The first model is the one reported; run it on a quiet machine (the load is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", type=Path, help="ONNX files; the first is the one reported")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    import ghostify.export.onnx as export_onnx
    import ghostify.export.runtime as runtime
    from ghostify import steps

    original = runtime.GraphModel.__init__
    print(f"Machine: {common.machine_line(common.machine_info())}, load {os.getloadavg()[0]:.2f}\n")
    print("| worker threads between runs | sessions | threads | median wall ms | median CPU ms |\n|---|---|---|---|---|")
    for spinning in (True, False):
        # bench makes its sessions sleep; for the "spinning" rows force ORT's default back on
        runtime.GraphModel.__init__ = lambda self, path, *a, spinning_=spinning, **kw: original(  # noqa: E731
            self, path, *a, **{**kw, "spinning": spinning_})
        for models in (args.models[:1], args.models):
            for threads in (1, 2):
                rows = steps.bench([str(m) for m in models], batch_size=args.batch_size, seq_len=args.seq_len,
                                   threads=threads, rounds=args.rounds, warmup=1)
                print(f"| {'spinning' if spinning else 'sleeping'} | {len(models)} | {threads} | "
                      f"{rows[0]['median_ms']:.0f} | {rows[0]['cpu_median_ms']:.0f} |", flush=True)
    runtime.GraphModel.__init__ = original
    del export_onnx


if __name__ == "__main__":
    main()
