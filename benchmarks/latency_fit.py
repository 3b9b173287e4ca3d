"""How well the latency model predicts the speed-ups of the shapes ``compress`` ends in (issue 46).

``ghostify latency`` fits ``base + layers x layer + heads x head + neurons x neuron`` milliseconds on one- and
two-layer probe models and checks the fit on whole models of full depth. A speed-up is the dense model's time
over a pruned model's, and at 3x the pruned models are deep and thin (4 layers of 1–2 heads). This script times,
in one run (the models taking turns, as ``ghostify latency`` times them), the latency model's own probes and
checks and the shapes given with ``--shapes``, fits the probes as ghostify does, and prints each shape's speed-up
as measured, as predicted over the *fitted* dense time (what ``prune --speedup`` plans with), and as predicted over
the *measured* dense time.

    python benchmarks/latency_fit.py MODEL --runtime onnx-int8 --rounds 40 --output latency_fit.md
    python benchmarks/latency_fit.py MODEL --shapes "4x2x352;3x5x672;2x12x1536"

A shape is ``LAYERSxHEADSxNEURONS`` (each layer the same) or with per-layer lists, ``4x1,3,2,4x528,504,192,888``;
shapes are separated by ``;``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

from ghostify.checkpoint import load_config  # noqa: E402
from ghostify.latency_model import Deployment, LatencyModel  # noqa: E402
from ghostify.steps.bench import take_turns  # noqa: E402
from ghostify.steps.latency import (Shape, fit_costs, original_geometry, prepared_pass, probe_config,  # noqa: E402
                                    probe_shapes, validation_shapes)

#: the shapes compress kept at 3x on a 2-core Xeon (ONNX Runtime int8 and OpenVINO int8), and neighbours of them
SHAPES = ("4x2x352;4x1x192;4x1x912,648,216,144;4x1,3,2,4x528,504,192,888;1x2x352;2x2x352;4x2x384;6x1x192;3x5x672;"
          "2x12x1536;6x12x192;6x1x1536;4x4x768")


def parse_shapes(text: str) -> list[Shape]:
    """``LAYERSxHEADSxNEURONS`` items separated by ``;``, HEADS and NEURONS one value for every layer or one per
    layer (comma-separated): ``4x2x352;4x1,3,2,4x528,504,192,888``."""
    shapes = []
    for item in filter(None, text.replace(" ", "").split(";")):
        try:
            layers, heads, neurons = item.split("x")
            count = int(layers)
            h, n = [int(v) for v in heads.split(",")], [int(v) for v in neurons.split(",")]
        except ValueError:
            raise SystemExit(f"--shapes: {item!r} is not LAYERSxHEADSxNEURONS, e.g. 4x2x352 or 2x1,3x96,192") from None
        h, n = (h * count if len(h) == 1 else h), (n * count if len(n) == 1 else n)
        if len(h) != count or len(n) != count:
            raise SystemExit(f"--shapes: {item!r} gives neither 1 nor {count} head and neuron counts")
        shapes.append(Shape(f"{count} layers, {heads} heads, {neurons} neurons", tuple(h), tuple(n)))
    return shapes


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="the dense checkpoint whose geometry the probes have")
    p.add_argument("--runtime", default="onnx-int8")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)
    config = probe_config(load_config(args.model))
    geometry = original_geometry(config)
    deployment = Deployment(runtime=args.runtime, batch_size=1, seq_len=args.seq_len, threads=1)
    probes = probe_shapes(geometry)
    checks = validation_shapes(geometry, per_layer=True)
    extra = parse_shapes(args.shapes)
    shapes = [*probes, *checks, *extra]
    torch.set_num_threads(1)  # the deployment's one thread, as ghostify latency times it
    info = common.machine_info()
    with tempfile.TemporaryDirectory(prefix="latency-fit-") as scratch:
        runs = [prepared_pass(config, s, deployment, 0, Path(scratch) / f"{i:02d}") for i, s in enumerate(shapes)]
        _, cpu = take_turns(runs, rounds=args.rounds, warmup=args.warmup)
    measured = [statistics.median(c) for c in cpu]  # one thread: CPU time is the pass's own work
    rows = [{**s.row(), "measured_ms": m} for s, m in zip(shapes, measured)]
    (base, layer, head, neuron), _ = fit_costs(rows[:len(probes)], geometry.hidden_size)
    fitted = LatencyModel(geometry, deployment, info["cpu"], base_ms=base, layer_ms=layer, head_ms=head,
                          neuron_ms=neuron)  # what `ghostify latency` would have fitted on these timings

    def predicted(shape: Shape) -> float:
        return fitted.predict(shape.heads, shape.neurons)

    dense_shape = checks[0]
    dense_measured, dense_fitted = measured[len(probes)], predicted(dense_shape)
    lines = [f"# Latency model against the shapes compress keeps ({args.runtime})", "",
             f"`python benchmarks/latency_fit.py {args.model} --runtime {args.runtime} --rounds {args.rounds}`", "",
             f"Fit on the {len(probes)} probes: {base:.3f} ms + {layer:.3f} a layer + {head:.4f} a head + "
             f"{neuron:.6f} a neuron. Dense: measured {dense_measured:.2f} ms, fitted {dense_fitted:.2f} ms.", "",
             "| model | measured ms | fitted ms | speed-up measured | predicted (fitted dense) | "
             "predicted (measured dense) |", "|---|---|---|---|---|---|"]
    errors = {"fitted": [], "measured": []}
    for shape, ms in zip(shapes, measured):
        guess = predicted(shape)
        speedup = dense_measured / ms
        over_fitted, over_measured = dense_fitted / guess, dense_measured / guess
        if shape in extra:
            errors["fitted"].append(over_fitted / speedup - 1)
            errors["measured"].append(over_measured / speedup - 1)
        lines.append(f"| {shape.name} | {ms:.2f} | {guess:.2f} | {speedup:.2f}x | {over_fitted:.2f}x | "
                     f"{over_measured:.2f}x |")
    for name, values in errors.items():
        if values:
            lines.append(f"\nSpeed-ups of the {len(values)} `--shapes` over the {name} dense time: "
                         f"{100 * statistics.mean(values):+.1f}% on average, at most "
                         f"{100 * max(map(abs, values)):.1f}% off.")
    lines += ["", f"Machine: {common.machine_line(common.finish_info(info))}; one thread per model, medians of CPU "
                  f"time over {args.rounds} rounds, batch 1 x {args.seq_len}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
