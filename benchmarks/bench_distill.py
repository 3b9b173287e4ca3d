"""Distillation throughput against the sum of its parts, side by side in one run.

For the same batches: (a) the teacher's forward pass without gradients, (b) the student's forward
and backward pass (a plain loss on its logits), (c) one GhostBERT distillation step (teacher forward
+ student forward with hidden states and attention-block hooks + the layer-wise MSE losses +
backward). The overhead of distillation is c / (a + b) - 1 (target: at most 10%). Peak memory: the
largest resident set of a fresh process that builds both models and runs only that variant.

    python benchmarks/bench_distill.py                 # BERT-base teacher, 6/12 student with ghosts
    python benchmarks/bench_distill.py --quick         # smoke test (< 1 min)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def build(layers: int, width: Fraction):
    from ghostify.architectures import get_adapter
    from ghostify.data import resolve_task
    from ghostify.methods.ghost import GhostSettings, attach_ghosts
    from ghostify.methods.pruning import magnitude_importance
    from ghostify.methods.pruning.apply import dense_record, prune
    from ghostify.tasks import kind_for
    from ghostify.training.layer_map import build_layer_map
    from ghostify.training.objectives import DistillObjective, DistillWeights

    teacher = common.bert_base(layers=layers, seed=0)
    student = common.bert_base(layers=layers, seed=1)
    adapter = get_adapter(student.config)
    _, record = prune(student, dense_record(student, adapter), magnitude_importance(student, adapter),
                      heads_width=width, ffn_width=width)
    student.config.ghostify = record.to_dict()
    attach_ghosts(student, GhostSettings())
    student.train()
    objective = DistillObjective(student, teacher, weights=DistillWeights(), layer_map=build_layer_map(layers, layers),
                                 kind=kind_for(resolve_task("sst2")))
    return teacher, student, objective


def variants(teacher, student, objective, batch):
    inputs = {k: v for k, v in batch.items() if k != "labels"}

    def teacher_forward():
        with torch.no_grad():
            teacher(**inputs)

    def student_forward_backward():
        student(**inputs).logits.float().pow(2).mean().backward()
        student.zero_grad(set_to_none=True)

    def distill_step():
        loss, _ = objective(batch)
        loss.backward()
        student.zero_grad(set_to_none=True)

    return {"teacher forward": teacher_forward, "student forward+backward": student_forward_backward,
            "distillation step": distill_step}


def peak_memory(args, variant: str) -> float:
    """MB of peak RSS of a fresh process running one variant twice."""
    code = (f"import sys; sys.argv=['x']; sys.path.insert(0, {str(Path(__file__).parent)!r});"
            f"import bench_distill as b; b.memory_child({args.layers}, {str(args.width)!r}, {args.batch_size}, "
            f"{args.seq_len}, {variant!r}, {args.threads})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def memory_child(layers: int, width: str, batch_size: int, seq_len: int, variant: str, threads: int) -> None:
    common.set_threads(threads)
    teacher, student, objective = build(layers, Fraction(width))
    fns = variants(teacher, student, objective, common.random_batch(batch_size, seq_len))
    for _ in range(2):
        fns[variant]()
    # the whole process: both models (and the student's optimizer-free gradients) plus activations
    print(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--width", default="6/12")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.quick:
        args.layers, args.batch_size, args.seq_len, args.repeats = 2, 8, 64, 2
    common.set_threads(args.threads)
    info = common.machine_info()
    teacher, student, objective = build(args.layers, Fraction(args.width))
    batch = common.random_batch(args.batch_size, args.seq_len)
    times = common.interleaved(variants(teacher, student, objective, batch), repeats=args.repeats,
                               log=common.stderr_log)
    med = {name: common.median(values) for name, values in times.items()}
    parts = med["teacher forward"] + med["student forward+backward"]
    overhead = med["distillation step"] / parts - 1
    memory = {name: peak_memory(args, name) for name in times}
    rows = [[name, f"{med[name] * 1000:.0f}", f"{args.batch_size / med[name]:.1f}", f"{memory[name]:.0f}"]
            for name in times]
    rows.append(["sum of parts (teacher fwd + student fwd/bwd)", f"{parts * 1000:.0f}",
                 f"{args.batch_size / parts:.1f}", ""])
    info = common.finish_info(info)
    print(f"BERT-base-sized teacher ({args.layers} layers) -> student at width {args.width} with ghost modules, "
          f"batch {args.batch_size}, sequence {args.seq_len}, medians of {args.repeats} interleaved rounds")
    print(common.markdown_table(["variant", "ms per batch", "samples/s", "peak RSS MB"], rows))
    print(f"\ndistillation overhead over the sum of its parts: {overhead * 100:+.1f}%")
    print(f"\nmachine: {common.machine_line(info)}")
    common.write_json(args.json, {"args": vars(args), "median_seconds": med, "overhead": overhead,
                                  "peak_rss_mb": memory, "machine": info, "times": times})


if __name__ == "__main__":
    main()
