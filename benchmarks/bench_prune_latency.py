"""CPU latency and peak memory of a base-sized model pruned to several widths, side by side.

A randomly initialised base-sized classifier (``--family bert``: ``BertConfig()``; ``--family
modernbert``: ``ModernBertConfig()``, 22 layers, hidden 768, 12 heads, FFN 1152; speed does not
depend on the weights) is pruned
with ``ghostify.methods.pruning.prune`` (magnitude scores, uniform allocation, the same width for heads and
FFN neurons) to each width; the unpruned model is the baseline. In one run:

* **latency**: forward under ``torch.inference_mode()`` at each batch size (sequence length 128, no
  padding). Per batch size: warm-up rounds, then repetitions in which every model runs once,
  round-robin, the starting model rotating (so machine load hits all alike). Reported: median
  latency and speed-up = median(unpruned) / median(model).
* **FLOPs** from ``ghostify.flops.measure`` (batch 1, the same sequence length): the FLOP ratio is
  FLOPs(unpruned) / FLOPs(model), the ideal speed-up.
* **peak memory**: every model is pickled to a temporary file and loaded in a fresh process (forked
  from a multiprocessing fork server that has only imported torch and transformers) that measures
  its own resident set: the kernel's high-water mark (``VmHWM`` in /proc/self/status) is reset to
  the current RSS (``echo 5 > /proc/self/clear_refs``) once the imports and inputs exist; RSS after
  loading the model = weights, the high-water mark during two forwards at each batch size =
  weights + activations + temporaries, both as increments over the pre-load RSS; median of
  ``--memory-repeats`` processes per model (round-robin), since the batch-32 peak moves by tens of
  MiB from process to process (allocator caching). ``ru_maxrss`` is not used: in a child started
  by fork+exec it reports the *parent's* peak.

    python benchmarks/bench_prune_latency.py            # full run (~4 min on 2 cores)
    python benchmarks/bench_prune_latency.py --quick    # smoke test (< 1 min)
    python benchmarks/bench_prune_latency.py --family modernbert --widths 12/12,6/12,3/12 --no-memory
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import torch  # noqa: E402

DENSE = "unpruned"


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", default="12/12,9/12,6/12,3/12,1/12", help="comma-separated widths (heads = FFN)")
    p.add_argument("--batch-sizes", type=int_list, default=[1, 32], help="comma-separated (default 1,32)")
    p.add_argument("--repeats", type=int_list, default=[30, 7], help="timed rounds per batch size (default 30,7)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per batch size before timing")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--family", default="bert", help="model type whose default config is built (bert, modernbert, ...)")
    p.add_argument("--layers", type=int, default=None, help="encoder layers (default: the config's; fewer only for smoke tests)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--memory-repeats", type=int, default=3, help="fresh processes per model (median reported)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 2 layers, widths 12/12,6/12,1/12, batch 1,4, seq 64, few repeats, 1 memory process per model",
    )
    p.add_argument("--json", metavar="PATH", help="also write all results (raw times included) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.quick:
        args.widths, args.batch_sizes, args.repeats, args.seq_len = "12/12,6/12,1/12", [1, 4], [3, 2], 64
        args.layers, args.memory_repeats = 2, 1
    if len(args.repeats) == 1:
        args.repeats = args.repeats * len(args.batch_sizes)
    if len(args.repeats) != len(args.batch_sizes):
        p.error("--repeats needs one value, or one per --batch-sizes entry")
    return args


# ----- peak memory, in a fresh process ---------------------------------------------------------
def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current VmRSS (Linux >= 4.0)


def memory_child(path: str, batch_sizes: list[int], seq_len: int, threads: int) -> dict:
    """Runs in its own process: load one pickled model, return RSS increments in MiB."""
    torch.set_num_threads(threads)
    inputs = {bs: common.random_batch(bs, seq_len, labels=False) for bs in batch_sizes}
    with torch.inference_mode():  # start the thread pool etc. before the baseline
        torch.ones(64, 64) @ torch.ones(64, 64)
    gc.collect()
    _reset_peak()
    base = _status_kb("VmRSS")
    model = torch.load(path, weights_only=False).eval()
    gc.collect()
    out = {"base_rss_mib": base / 1024, "load_peak_mib": (_status_kb("VmHWM") - base) / 1024}
    out["weights_rss_mib"] = (_status_kb("VmRSS") - base) / 1024
    out["forward_peak_mib"] = {}
    for bs in sorted(batch_sizes):
        _reset_peak()
        with torch.inference_mode():
            for _ in range(2):
                model(**inputs[bs])
        out["forward_peak_mib"][str(bs)] = (_status_kb("VmHWM") - base) / 1024
    return out


def measure_memory(models: dict[str, torch.nn.Module], args: argparse.Namespace, log) -> tuple[dict, dict]:
    """One fresh process per model and repetition, forked from a multiprocessing fork server that
    has imported torch and transformers' BERT but never held a model or run a forward. Models are
    measured round-robin, ``--memory-repeats`` times; returns (medians, all raw results)."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    family = args.family.replace("-", "_")
    ctx.set_forkserver_preload(["torch", f"transformers.models.{family}.modeling_{family}"])
    raw: dict[str, list[dict]] = {name: [] for name in models}
    with tempfile.TemporaryDirectory(prefix="ghostify-bench-") as tmp:
        paths = {}
        for i, (name, model) in enumerate(models.items()):
            paths[name] = Path(tmp) / f"model{i}.pt"
            torch.save(model, paths[name])
        names = list(models)
        for r in range(args.memory_repeats):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                with ctx.Pool(1) as pool:
                    result = pool.apply(memory_child, (str(paths[name]), args.batch_sizes, args.seq_len, args.threads))
                raw[name].append(result)
                log(f"  [memory rep {r + 1}/{args.memory_repeats}] {name}: {result}")
    medians = {}
    for name, results in raw.items():
        medians[name] = {
            key: common.median([r[key] for r in results]) for key in ("base_rss_mib", "load_peak_mib", "weights_rss_mib")
        }
        medians[name]["forward_peak_mib"] = {
            bs: common.median([r["forward_peak_mib"][bs] for r in results]) for bs in results[0]["forward_peak_mib"]
        }
    return medians, raw


# ----- main ------------------------------------------------------------------------------------
def main(argv=None) -> dict:
    args = parse_args(argv)
    from ghostify.architectures import get_adapter
    from ghostify.flops import measure
    from ghostify.methods.pruning import magnitude_importance, parse_width
    from ghostify.methods.pruning.apply import dense_record, prune

    common.set_threads(args.threads)
    info = common.machine_info()
    log = (lambda m: None) if args.quiet else common.stderr_log
    log(f"machine: {common.machine_line(info)}")

    dense = common.base_classifier(args.family, layers=args.layers)
    adapter = get_adapter(dense.config)
    record = dense_record(dense, adapter)
    scores = magnitude_importance(dense, adapter)
    num_heads, ffn_size = adapter.num_units(dense.config), adapter.ffn_size(dense.config)
    models: dict[str, torch.nn.Module] = {DENSE: dense}
    shape: dict[str, str] = {DENSE: f"{num_heads} / {ffn_size}"}
    for text in args.widths.split(","):
        width = parse_width(text.strip())
        model = copy.deepcopy(dense)
        _, new = prune(model, record, scores, heads_width=width, ffn_width=width)
        name = f"pruned {text.strip()}"
        models[name] = model.eval()
        shape[name] = f"{len(new.heads[0])} / {new.ffn[0]}"
    log(f"models: {', '.join(f'{n} ({s})' for n, s in shape.items())}")

    sizes = {name: measure(model, seq_len=args.seq_len) for name, model in models.items()}

    latency: dict[str, dict[str, list[float]]] = {}
    others: dict[str, float] = {}
    for bs, repeats in zip(args.batch_sizes, args.repeats):
        batch = common.random_batch(bs, args.seq_len, labels=False)

        def forward(model, batch=batch):
            def run():
                with torch.inference_mode():
                    model(**batch)

            return run

        log(f"latency batch {bs}: {args.warmup} warm-up + {repeats} timed round(s) of {len(models)} models")
        snap = common.cpu_snapshot()
        latency[str(bs)] = common.interleaved(
            {name: forward(m) for name, m in models.items()}, repeats=repeats, warmup=args.warmup, log=log
        )
        others[str(bs)] = common.other_cores(snap, common.cpu_snapshot())

    memory = memory_raw = None
    if not args.no_memory:
        log(f"peak memory: {args.memory_repeats} fresh process(es) per model, round-robin")
        memory, memory_raw = measure_memory(models, args, log)

    # ----- tables ---------------------------------------------------------------------------------
    d_flops = sizes[DENSE].flops
    med = {bs: {n: common.median(ts) for n, ts in per.items()} for bs, per in latency.items()}
    best = {bs: {n: min(ts) for n, ts in per.items()} for bs, per in latency.items()}
    headers = ["model", "heads / FFN per layer", "params (M)", "GFLOPs", "FLOP ratio"]
    for bs in latency:
        headers += [f"b{bs} ms", f"b{bs} speed-up", f"b{bs} spread", f"b{bs} speed-up of min"]
    rows = []
    for name in models:
        row = [
            name,
            shape[name],
            f"{sizes[name].params / 1e6:.1f}",
            f"{sizes[name].flops / 1e9:.2f}",
            f"{d_flops / sizes[name].flops:.2f}x",
        ]
        for bs, per in latency.items():
            row += [
                f"{1000 * med[bs][name]:.1f}",
                f"{med[bs][DENSE] / med[bs][name]:.2f}x",
                f"{100 * common.spread(per[name]):.0f}%" if len(per[name]) > 1 else "-",
                f"{best[bs][DENSE] / best[bs][name]:.2f}x",
            ]
        rows.append(row)
    latency_table = common.markdown_table(headers, rows)

    setup_line = (
        ("" if args.layers is None else f"**{args.layers} layers only (smoke test)**, ")
        + f"{type(dense).__name__} of the default {type(dense.config).__name__}() ({dense.config.num_hidden_layers} layers; "
        f"random init, {dense.config._attn_implementation} attention), "
        f"seq {args.seq_len} (no padding), {args.threads} threads, torch.inference_mode; "
        + "; ".join(f"batch {bs}: {args.warmup} warm-up + {r} interleaved rounds" for bs, r in zip(args.batch_sizes, args.repeats))
        + f". GFLOPs: ghostify.flops.measure (batch 1, seq {args.seq_len}); FLOP ratio and speed-up are unpruned / model "
        "(of medians; 'speed-up of min' uses each model's fastest round instead); spread = (max - min) / median. "
        + "Other processes kept "
        + ", ".join(f"{others[bs]:.2f} cores busy during batch {bs}" for bs in others)
        + f" (of {info['logical_cpus']})."
    )
    print(f"### Pruned-model latency\n\n{setup_line}\n\n{latency_table}\n")

    if memory is not None:
        mheaders = ["model", "fp32 params (MiB)", "RSS after load (MiB)"]
        for bs in sorted(args.batch_sizes):
            mheaders += [f"peak b{bs} (MiB)", f"b{bs} activations (MiB)", f"b{bs} peak ratio"]
        mrows = []
        for name in models:
            m = memory[name]
            row = [name, f"{sizes[name].params * 4 / 2**20:.0f}", f"{m['weights_rss_mib']:.0f}"]
            for bs in sorted(args.batch_sizes):
                peak = m["forward_peak_mib"][str(bs)]
                dpeak = memory[DENSE]["forward_peak_mib"][str(bs)]
                row += [f"{peak:.0f}", f"{peak - m['weights_rss_mib']:.0f}", f"{dpeak / peak:.2f}x"]
            mrows.append(row)
        print(
            f"### Pruned-model peak memory\n\nMedians of {args.memory_repeats} fresh process(es) per model (round-robin); increments over the process's RSS before the "
            "model was loaded (torch, transformers and the inputs already resident). Peak = kernel high-water mark "
            "(VmHWM, reset before each measurement) during two forwards; activations = peak - RSS after load; "
            "peak ratio = unpruned / model.\n\n" + common.markdown_table(mheaders, mrows) + "\n"
        )
    common.finish_info(info)
    print(f"machine: {common.machine_line(info)}")

    result = {
        "benchmark": "prune_latency",
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]),
        "machine": info,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "attn_implementation": dense.config._attn_implementation,
        "shapes": shape,
        "sizes": {n: s.as_dict() for n, s in sizes.items()},
        "latency_s": latency,
        "speedup": {bs: {n: med[bs][DENSE] / med[bs][n] for n in models} for bs in med},
        "speedup_of_min": {bs: {n: best[bs][DENSE] / best[bs][n] for n in models} for bs in best},
        "flop_ratio": {n: d_flops / sizes[n].flops for n in models},
        "other_processes_cores_busy": others,
        "memory_mib": memory,
        "memory_mib_raw": memory_raw,
    }
    common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
