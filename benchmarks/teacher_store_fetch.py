"""What the teacher store costs a training step besides the teacher's pass: ``TeacherStore.fetch`` on batches of
made-up teacher outputs (MiniLM's shapes: 13 hidden states of 384 per token and the logits), the first visit of a
batch (its outputs moved to the CPU in float16, used and stored) and a later one (read back), medians of wall-clock
milliseconds per batch. The teacher is not run: what is timed is the store's own work.

Compare two checkouts side by side in one session by running it under each (the package on ``PYTHONPATH`` is the
one timed; the first line says which):

    PYTHONPATH=/path/to/before python benchmarks/teacher_store_fetch.py
    PYTHONPATH=. python benchmarks/teacher_store_fetch.py            # --device cuda on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import ghostify
from ghostify.training.teacher_store import Field, TeacherStore


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--tokens", type=int, default=64, help="the batch's padded length; each row has 8 to this many")
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--fields", type=int, default=13, help="per-token hidden states (MiniLM: embeddings + 2 x 6)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"ghostify from {Path(ghostify.__file__).parent}; torch {torch.__version__}, {device}, "
          f"{args.threads} thread(s)", file=sys.stderr)
    fields = [Field(f"hidden{j}", per_token=True) for j in range(args.fields)] + [Field("logits", False, head=True)]
    generator = torch.Generator().manual_seed(0)
    first, later = [], []
    with tempfile.TemporaryDirectory(prefix="ghostify-store-bench-") as tmp:
        store = TeacherStore(Path(tmp), "teacher", cap_bytes=1 << 40).open(Path(tmp))
        batches = []
        for b in range(args.batches):
            lengths = torch.randint(8, args.tokens + 1, (args.batch_size,), generator=generator)
            mask = (torch.arange(args.tokens)[None, :] < lengths[:, None]).long().to(device)
            outputs = {f.name: torch.randn(args.batch_size, args.tokens, args.hidden, generator=generator).to(device)
                       for f in fields if f.per_token}
            outputs["logits"] = torch.randn(args.batch_size, 2, generator=generator).to(device)
            keys = torch.arange(b * args.batch_size, (b + 1) * args.batch_size)
            batches.append((keys, mask, outputs))
        for visits in (first, later):
            for keys, mask, outputs in batches:
                _synchronize(device)
                start = time.perf_counter()
                store.fetch(keys, mask, fields, lambda rows, outputs=outputs: {k: v[rows] for k, v in outputs.items()})
                _synchronize(device)
                visits.append((time.perf_counter() - start) * 1000)
        store.close()
    print(f"first visit {statistics.median(first):.2f} ms a batch, later visits {statistics.median(later):.2f} ms "
          f"({args.batches} batches of {args.batch_size} x {args.tokens} tokens, {args.fields} fields of "
          f"{args.hidden} and the logits)")


def _synchronize(device: torch.device) -> None:
    # ghostify.device.synchronize's three lines, kept here: this script times older checkouts' packages too
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
