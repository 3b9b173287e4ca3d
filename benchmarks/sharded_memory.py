"""Peak resident memory per process of ``ghostify finetune`` and ``ghostify distill`` on 2 CPU
processes: data parallel (DDP) against FSDP2 and DeepSpeed ZeRO-3 (recipes/accelerate/*-cpu.yaml),
for a mid-size random BERT (hidden 768, 8 layers, intermediate 3072: 57M parameters, with the toy
tokenizer's small vocabulary so that the encoder layers, which every engine shards, hold nearly all
of them).

    OMP_NUM_THREADS=1 python benchmarks/sharded_memory.py --out benchmarks/results/sharded_memory.md

Each launch runs a few optimizer steps; every process reports its ``ru_maxrss`` (the peak resident
set: model build, sharding, forward, backward, AdamW's step, the gathered checkpoint) at exit.
Sharding needs ``GHOSTIFY_SHARDED_CPU=1`` on a machine without CUDA (docs/guides/distributed.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "recipes" / "accelerate"
MODEL = {"hidden_size": 768, "num_hidden_layers": 8, "num_attention_heads": 12, "intermediate_size": 3072}

# the launched program: ghostify's CLI, then this process's peak RSS into a file named by its rank
PROGRAM = """
import atexit, json, os, resource, sys
from torch.optim.optimizer import register_optimizer_step_post_hook

page, during = os.sysconf("SC_PAGE_SIZE"), [0]

def sample(optimizer, args, kwargs):  # the resident set right after each optimizer step
    with open("/proc/self/statm") as f:
        during[0] = max(during[0], int(f.read().split()[1]) * page)

def report():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    path = os.path.join(os.environ["PEAK_DIR"], f"rank{os.environ.get('RANK', '0')}.json")
    with open(path, "w") as f:
        json.dump({"peak_rss": peak, "training_rss": during[0]}, f)

register_optimizer_step_post_hook(sample)
atexit.register(report)
from ghostify.cli import run
sys.argv[0] = "ghostify"
run()
"""

ENGINES = {"DDP": None, "FSDP2": "fsdp2-cpu.yaml", "ZeRO-3": "zero3-cpu.yaml"}


def launch(engine: str, args: list[str], work: Path, peaks: Path) -> list[dict[str, int]]:
    """Of each of the 2 processes of one launch: its peak RSS (bytes) over the whole run, and the
    largest RSS right after an optimizer step (the training state, without the model build before
    sharding or the checkpoint gathered after)."""
    peaks.mkdir(parents=True)
    program = work / "program.py"
    program.write_text(PROGRAM)
    command = [sys.executable, "-m", "accelerate.commands.launch"]
    if ENGINES[engine] is None:
        command += ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no"]
    else:
        command += ["--config_file", str(CONFIGS / ENGINES[engine])]
    command += ["--main_process_port", "0", str(program), *args]
    # a fixed mmap threshold: every large tensor is its own mapping, returned to the system when freed,
    # so that the resident set follows the live tensors (glibc otherwise keeps freed memory resident)
    env = dict(os.environ, OMP_NUM_THREADS="1", GHOSTIFY_SHARDED_CPU="1", PEAK_DIR=str(peaks),
               MALLOC_MMAP_THRESHOLD_="131072")
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{engine} failed:\n{result.stderr[-3000:]}")
    return [json.loads((peaks / f"rank{r}.json").read_text()) for r in (0, 1)]


# ---- the plan on paper: XLM-R XL (docs/guides/distributed.md) ------------------------------------
XL = {"layers": 36, "hidden": 2560, "ffn": 10240, "heads": 32, "vocab": 250880, "positions": 514}
GB = 1e9


def xl_params(width: float) -> tuple[int, int]:
    """(all parameters, embedding parameters) of XLM-R XL with ``width`` of its heads and FFN kept."""
    h, L = XL["hidden"], XL["layers"]
    d, i = int(h * width), int(XL["ffn"] * width)
    emb = (XL["vocab"] + XL["positions"] + 1) * h + 2 * h  # words, positions, one token type, LayerNorm
    layer = 3 * (h * d + d) + (d * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return emb + L * layer + h * h + h, emb  # + the pooler


def xl_activations(width: float, tokens: int, length: int, value_bytes: int) -> float:
    """Bytes the backward keeps for ``tokens`` tokens, per encoder layer summed: per token 5h (layer
    inputs, LayerNorm inputs, dropout masks) + 4d (Q, K, V, context) + 2i (FFN before and after GELU)
    + 2 x heads x length (attention probabilities and their dropout mask) values."""
    h = XL["hidden"]
    d, i, k = h * width, XL["ffn"] * width, XL["heads"] * width
    return XL["layers"] * tokens * (5 * h + 4 * d + 2 * i + 2 * k * length) * value_bytes


def plan(batch: int = 32, length: int = 128) -> str:
    """Memory per GPU for distilling XLM-R XL into 6/12 and 3/12 students (and fine-tuning the teacher)
    at ``batch`` x ``length``, under DDP, FSDP2 and ZeRO-3 on 1, 2, 4, 8 GPUs, in fp32 and bf16."""
    tokens = batch * length
    teacher, emb = xl_params(1.0)
    rows = ["| run | precision | engine | 1 GPU | 2 GPUs | 4 GPUs | 8 GPUs |", "|---|---|---|---|---|---|---|"]
    for run, width, with_teacher in (("finetune teacher (3.5B)", 1.0, False), ("distill 6/12", 0.5, True),
                                     ("distill 3/12", 0.25, True)):
        student, _ = xl_params(width)
        for precision, value in (("fp32", 4), ("bf16", 2)):
            states = 16 * student  # fp32 weight 4 + gradient 4 + AdamW moments 8 (bf16: master copy kept in fp32)
            frozen = 4 * teacher if with_teacher else 0  # the teacher as loaded, fp32
            acts = xl_activations(width, tokens, length, value)
            if with_teacher:  # the teacher's hidden states and attention scores, kept for the losses
                acts += (XL["layers"] + 1) * tokens * XL["hidden"] * value
                acts += XL["layers"] * tokens * XL["heads"] * length * value
            transient = 2 * 4 * emb  # a sharded engine gathers the embedding matrix and its full gradient
            for engine in ("DDP", "FSDP2", "ZeRO-3"):
                cells = []
                for n in (1, 2, 4, 8):
                    if engine == "DDP" or n == 1:
                        total = states + frozen + acts / n
                    else:
                        total = (states + frozen) / n + acts / n + transient
                    cells.append(f"{total / GB:.1f}")
                rows.append(f"| {run} | {precision} | {engine} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results table here (markdown)")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--plan", action="store_true", help="print the XLM-R XL memory plan (no runs) and stop")
    options = parser.parse_args()
    if options.plan:
        for width in (1.0, 0.5, 0.25):
            total, emb = xl_params(width)
            print(f"XLM-R XL at width {width}: {total / 1e9:.3f}B parameters ({emb / 1e9:.3f}B in the embeddings)")
        print(plan())
        return

    from ghostify.testing import tiny_checkpoint, write_toy_dataset

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny_checkpoint(work / "model", **MODEL)
        tiny_checkpoint(work / "teacher", seed=1, **MODEL)
        data = write_toy_dataset(work / "data", train=64, validation=16)
        from ghostify import load_model

        params = sum(p.numel() for p in load_model(work / "model").parameters())
        common = ["--dataset", str(data), "--text-columns", "sentence", "--epochs", "1", "--batch-size", "16",
                  "--max-length", "64", "--max-samples", "32"]
        commands = {
            "finetune": ["finetune", str(work / "model"), *common],
            # with the logits: data parallelism refuses a task head that gets no gradient (hidden states only)
            "distill": ["distill", "--teacher", str(work / "teacher"), "--student", str(work / "model"),
                        "--logit-weight", "1", *common],
        }
        for name, args in commands.items():
            for engine in options.engines:
                out = work / f"{name}-{engine}"
                started = time.perf_counter()
                peaks = launch(engine, [*args, "-o", str(out)], work, work / f"peaks-{name}-{engine}")
                rows.append({"command": name, "engine": engine, "peaks": peaks, "wall": time.perf_counter() - started})
                print(f"{name:8} {engine:7} peak RSS per process: "
                      + ", ".join(f"{p['peak_rss'] / 2**20:.0f} MiB (after steps {p['training_rss'] / 2**20:.0f})"
                                  for p in peaks), flush=True)

    load = os.getloadavg()
    lines = [
        "# Peak resident memory per process: DDP against FSDP2 and ZeRO-3 (2 CPU processes)",
        "",
        f"Command: `OMP_NUM_THREADS=1 python benchmarks/sharded_memory.py --out {options.out}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average after the runs {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (`uptime`; a machine shared "
        "with other work: the times are not comparable, the memory is).",
        "",
        f"Model: random BERT {MODEL}, vocabulary 99 (toy tokenizer): {params / 1e6:.1f}M parameters, "
        f"{params * 4 / 2**20:.0f} MiB in fp32; distill's teacher the same size. fp32, AdamW, batch 16 x 64 tokens "
        "(8 per process), 2 optimizer steps, an evaluation of 16 rows.",
        "",
        "Peak: the whole run (`ru_maxrss`: model build before sharding, training, the checkpoint gathered on "
        "rank 0). After steps: the largest resident set right after an optimizer step (the training state). "
        "Run with `MALLOC_MMAP_THRESHOLD_=131072` so that freed tensors leave the resident set.",
        "",
        "| command | engine | peak rank 0 | peak rank 1 | after steps rank 0 | after steps rank 1 | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        (a, b), (c, d) = ([p[key] / 2**20 for p in row["peaks"]] for key in ("peak_rss", "training_rss"))
        lines.append(f"| {row['command']} | {row['engine']} | {a:.0f} MiB | {b:.0f} MiB | {c:.0f} MiB | {d:.0f} MiB "
                     f"| {row['wall']:.0f} s |")
    text = "\n".join(lines) + "\n"
    print(text)
    if options.out:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(text)


if __name__ == "__main__":
    main()
