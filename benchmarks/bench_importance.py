"""Cost of gradient importance scoring relative to a plain forward+backward pass, and prune time.

On a randomly initialised BERT-base-sized classifier (speed does not depend on the weights), over
the same N random samples (fixed sequence length, no padding, batch size B), side by side:

* ``forward+backward``: a training-style step per batch: ``zero_grad(set_to_none=True)``, forward
  with labels, ``loss.backward()`` computing every parameter's gradient;
* ``compute_importance``: ``ghostify.methods.pruning.compute_importance`` on the same batches;
* ``forward (inference_mode)``: forward only, for reference.

All in eval mode (no dropout). One repetition runs each variant once over all N samples; by default
the round-robin is per batch (every variant runs on batch i, in a rotating order, before any runs
on batch i+1; a pass's time is the sum over its batches, and ``compute_importance`` is then called
once per batch, which only adds its tiny per-call setup), or per pass with ``--interleave pass``. The ratio reported is median(importance) /
median(forward+backward); the issue's target is <= 1.2.

Then the time of ``magnitude_importance`` and of ``prune`` to width 3/12 (heads and FFN) with
magnitude scores and with the gradient scores just computed (uniform allocation; global allocation
for reference), each on a fresh copy of the dense model (the copy is not timed).

    python benchmarks/bench_importance.py            # full run (~7 min on 2 cores)
    python benchmarks/bench_importance.py --quick    # smoke test (< 1 min)
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=256, help="N samples per pass (default 256)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="timed passes over the N samples per variant")
    p.add_argument("--prune-repeats", type=int, default=5, help="timed prune calls per variant")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--width", default="3/12", help="prune width for heads and FFN (default 3/12)")
    p.add_argument("--label-free", action="store_true", help="score with compute_importance(label_free=True)")
    p.add_argument("--no-forward-ref", action="store_true", help="skip the forward-only reference variant")
    p.add_argument(
        "--interleave",
        choices=["batch", "pass"],
        default="batch",
        help="round-robin unit: every batch (default; each variant runs on batch i before any runs on batch "
        "i+1, so short bursts of load hit all variants alike) or every whole pass over the N samples",
    )
    p.add_argument("--quick", action="store_true", help="smoke test: 8 samples, batch 8, seq 64, 1 repeat")
    p.add_argument("--json", metavar="PATH", help="also write all results (raw times included) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.quick:
        args.samples, args.batch_size, args.seq_len, args.repeats, args.prune_repeats = 8, 8, 64, 1, 1
    if args.samples % args.batch_size:
        p.error("--samples must be a multiple of --batch-size (every pass sees the same full batches)")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    from ghostify.architectures import get_adapter
    from ghostify.methods.pruning import compute_importance, magnitude_importance, parse_width
    from ghostify.methods.pruning.apply import dense_record, prune

    common.set_threads(args.threads)
    info = common.machine_info()
    log = (lambda m: None) if args.quiet else common.stderr_log
    log(f"machine: {common.machine_line(info)}")

    model = common.bert_base()
    adapter = get_adapter(model.config)
    n_batches = args.samples // args.batch_size
    batches = [common.random_batch(args.batch_size, args.seq_len, seed=i) for i in range(n_batches)]

    def train_step_pass(bs=batches):
        model.eval()
        for batch in bs:
            model.zero_grad(set_to_none=True)
            loss = model(**batch).loss
            loss.backward()
        model.zero_grad(set_to_none=True)  # do not keep 440 MB of gradients around for the others

    last_scores = {}

    def importance_pass(bs=batches):
        last_scores["scores"] = compute_importance(model, adapter, bs, label_free=args.label_free)

    def forward_pass(bs=batches):
        with torch.inference_mode():
            for batch in bs:
                model(**{k: v for k, v in batch.items() if k != "labels"})

    variants = {"forward+backward": train_step_pass, "compute_importance": importance_pass}
    if not args.no_forward_ref:
        variants["forward (inference_mode)"] = forward_pass

    log(f"warm-up: every variant on one batch of {args.batch_size}")
    for name, fn in variants.items():
        start = time.perf_counter()
        fn(batches[:1])
        log(f"  [warmup] {name}: {time.perf_counter() - start:.3f} s")
    log(f"timing: {args.repeats} repetition(s) of {args.samples} samples per variant, interleaved per {args.interleave}")
    batch_times: dict[str, list[float]] = {name: [] for name in variants}
    snap = common.cpu_snapshot()
    if args.interleave == "pass":
        times = common.interleaved(variants, repeats=args.repeats, warmup=0, log=log)
    else:
        times = {name: [] for name in variants}
        for r in range(args.repeats):
            totals = dict.fromkeys(variants, 0.0)
            for i, batch in enumerate(batches):
                one = common.interleaved(
                    {name: (lambda fn=fn, b=batch: fn([b])) for name, fn in variants.items()},
                    repeats=1,
                    warmup=0,
                    offset=r * len(batches) + i,
                    log=lambda m, r=r, i=i: log(f"  [rep {r + 1}/{args.repeats}, batch {i + 1}/{len(batches)}] {m.split('] ', 1)[1]}"),
                )
                for name, ts in one.items():
                    totals[name] += ts[0]
                    batch_times[name].append(ts[0])
            for name in variants:
                times[name].append(totals[name])

    others = common.other_cores(snap, common.cpu_snapshot())
    base = common.median(times["forward+backward"])
    paired = [i / b for i, b in zip(times["compute_importance"], times["forward+backward"])]
    importance_rows = []
    for name, ts in times.items():
        med = common.median(ts)
        importance_rows.append(
            [
                name,
                args.samples,
                f"{med:.2f}",
                f"{1000 * med / args.samples:.1f}",
                f"{med / base:.2f}x",
                f"{100 * common.spread(ts):.0f}%" if len(ts) > 1 else "-",
                ", ".join(f"{t:.2f}" for t in ts),
            ]
        )
    ratio = common.median(times["compute_importance"]) / base
    batch_ratios = [i / b for i, b in zip(batch_times["compute_importance"], batch_times["forward+backward"])]

    # ----- prune time ---------------------------------------------------------------------------
    width = parse_width(args.width)
    record = dense_record(model, adapter)
    magnitude = magnitude_importance(model, adapter)
    gradient = last_scores["scores"]
    holder = {}
    kept: dict[str, str] = {}

    def check_pruned():
        """Sanity (untimed): the copy really has the pruned shapes, summed over layers."""
        if "name" not in holder:
            return
        pruned, new = holder["model"], holder["record"]
        layers = adapter.layers(pruned)
        paths = adapter.paths_for_layer(layers[0])
        heads = sum(adapter.submodule(l, paths.query).out_features for l in layers) // adapter.head_size(model.config)
        ffn = sum(adapter.submodule(l, paths.ffn_up).out_features for l in layers)
        assert heads == sum(len(h) for h in new.heads) and ffn == sum(new.ffn), (heads, ffn)
        kept[holder.pop("name")] = f"{heads} heads, {ffn} neurons"

    def fresh_copy():
        check_pruned()
        holder.pop("model", None)
        holder["model"] = copy.deepcopy(model)

    def do_prune(name, scores, allocation):
        def run():
            _, new = prune(holder["model"], record, scores, heads_width=width, ffn_width=width, allocation=allocation)
            holder["record"], holder["name"] = new, name

        return run

    names = [
        f"prune uniform {args.width}, magnitude scores",
        f"prune uniform {args.width}, gradient scores",
        f"prune global {args.width}, gradient scores",
    ]
    prune_variants = {
        "magnitude_importance (scoring)": lambda: magnitude_importance(model, adapter),
        names[0]: do_prune(names[0], magnitude, "uniform"),
        names[1]: do_prune(names[1], gradient, "uniform"),
        names[2]: do_prune(names[2], gradient, "global"),
    }
    setup = {name: fresh_copy for name in prune_variants if name.startswith("prune")}
    log(f"prune timing: {args.prune_repeats} repetition(s), 1 warm-up round")
    prune_times = common.interleaved(prune_variants, repeats=args.prune_repeats, warmup=1, setup=setup, log=log)
    check_pruned()
    holder.clear()
    prune_rows = [
        [
            name,
            f"{1000 * common.median(ts):.1f}",
            f"{100 * common.spread(ts):.0f}%" if len(ts) > 1 else "-",
            kept.get(name, "-"),
        ]
        for name, ts in prune_times.items()
    ]

    setup_line = (
        f"BERT-base-sized BertForSequenceClassification (random init, {model.config._attn_implementation} attention, "
        f"eval mode), N={args.samples} samples, batch {args.batch_size}, seq {args.seq_len} (no padding), "
        f"{args.threads} threads, {args.repeats} repetition(s) interleaved per {args.interleave} after a 1-batch warm-up"
        + (", label-free" if args.label_free else "")
    )
    table1 = common.markdown_table(
        ["variant", "samples", "median s / pass", "ms / sample", "vs forward+backward", "spread", "all passes (s)"],
        importance_rows,
    )
    table2 = common.markdown_table(
        ["operation (BERT-base, fresh copy each call)", "median ms", "spread", "kept (all 12 layers)"], prune_rows
    )
    verdict = "meets" if ratio <= 1.2 else "MISSES"
    print(f"### Importance cost\n\n{setup_line}\n\n{table1}\n")
    print(
        f"compute_importance / forward+backward = **{ratio:.2f}x** ({verdict} the <= 1.2x target); "
        f"per-repetition ratios: {', '.join(f'{r:.2f}' for r in paired)}"
        + (
            f"; median of the {len(batch_ratios)} per-batch ratios: {common.median(batch_ratios):.2f} "
            f"(range {min(batch_ratios):.2f}-{max(batch_ratios):.2f})"
            if batch_ratios
            else ""
        )
        + f"; other processes kept {others:.2f} of {info['logical_cpus']} cores busy on average while timing\n"
    )
    print(
        f"### Prune time\n\nwidth {args.width} heads and FFN, {args.prune_repeats} interleaved repetition(s) "
        f"after 1 warm-up round (dense: {sum(len(h) for h in record.heads)} heads, {sum(record.ffn)} neurons)\n\n{table2}\n"
    )
    common.finish_info(info)
    print(f"machine: {common.machine_line(info)}")

    result = {
        "benchmark": "importance",
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]),
        "machine": info,
        "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "attn_implementation": model.config._attn_implementation,
        "times_s": times,
        "batch_times_s": batch_times,
        "batch_ratios": batch_ratios,
        "other_processes_cores_busy": others,
        "ratio_importance_vs_forward_backward": ratio,
        "paired_ratios": paired,
        "prune_times_s": prune_times,
        "pruned_kept": kept,
    }
    common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
