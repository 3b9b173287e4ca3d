"""Depth against width at the same FLOPs: ``ghostify drop-layers`` against ``ghostify prune``.

Two parts, one run (``--part`` picks one), written to ``benchmarks/results/drop_layers.md`` with the
command and the machine:

* **latency**: a randomly initialised BERT-base-sized classifier (``BertConfig()``: speed does not
  depend on the weights), as it is (12 layers), with ``drop-layers --keep 6`` (6 of 12 layers, no
  scores: evenly spaced) and with ``prune --width 6/12`` (half the heads and FFN neurons of every
  layer, weight magnitude): half the encoder FLOPs each. Each goes through the CLI's own code and
  ``export --format onnx --quantize int8``; latency from ``ghostify bench`` (the models take turns
  within each round; median of the CPU time per forward pass at 1 thread), PyTorch fp32 and ONNX
  Runtime int8 side by side, batch 1 and 32, sequence 128, no padding. FLOPs from ``ghostify info``.
* **real**: the quickstart's SST-2 chain on all-MiniLM-L6-v2 at its budget (``recipes/quickstart.yaml``:
  a teacher fine-tuned on 2,000 examples, importance on 512, distill and fine-tune with the
  teacher on 2,000, one epoch each), once with ``prune --width 6/12`` (the recipe as shipped) and
  once with ``drop-layers --keep 3`` in its place (3 of 6 layers, by the layer scores of the same
  importance stage): validation accuracy of each final model (PyTorch and its int8 export) and
  its measured latency, as above.

    python benchmarks/drop_layers.py --work /tmp/bench-drop                      # both parts (~40 min on 2 cores)
    python benchmarks/drop_layers.py --work /tmp/bench-drop --part latency       # ~15 min
    python benchmarks/drop_layers.py --work /tmp/bench-drop --quick --output /tmp/drop.md   # smoke test (< 5 min)

``--minilm`` and ``--glue`` default to the local copies in ``../shared`` beside the repository.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "drop_layers.md"
RUNTIMES = ("pytorch", "onnx int8")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the checkpoints, exports and runs (reused)")
    p.add_argument("--part", choices=("both", "latency", "real"), default="both")
    p.add_argument("--rounds", type=int, nargs=2, default=(15, 3), metavar=("BATCH1", "BATCH32"))
    p.add_argument("--minilm", type=Path, default=REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2")
    p.add_argument("--glue", type=Path, default=REPO.parent / "shared" / "data" / "glue")
    p.add_argument("--output", type=Path, default=RESULTS,
                   help=f"the markdown report (default {RESULTS.relative_to(REPO)})")
    p.add_argument("--quick", action="store_true", help="2-layer BERT, 2 rounds, the real chain on 64 examples: "
                   "checks that the script runs")
    return p.parse_args(argv)


# ----- building, exporting, timing ---------------------------------------------------------------
def export_int8(path: Path, target: Path) -> Path:
    """``ghostify export --format onnx --quantize int8`` of ``path`` into ``target`` (once)."""
    from ghostify import steps

    if not (target / "model_int8.onnx").is_file():
        result = steps.export(path, target, format="onnx", quantize="int8", overwrite=True)
        common.stderr_log(f"exported {path}: int8 vs PyTorch {result['int8_difference']:.1e}")
    return target / "model_int8.onnx"


def timed(models: dict[str, Path], rounds: dict[int, int], exports: Path) -> dict[tuple[str, str, int], float]:
    """(model, runtime, batch) -> median CPU ms per forward at 1 thread, every file taking turns."""
    from ghostify import steps

    def slug(name: str) -> str:
        return "".join(c if c.isalnum() else "-" for c in name).strip("-")

    files = {(name, runtime): path if runtime == "pytorch" else export_int8(path, exports / slug(name))
             for name, path in models.items() for runtime in RUNTIMES}
    out = {}
    for batch, count in rounds.items():
        common.stderr_log(f"timing batch {batch}: {count} rounds of {len(files)} models")
        rows = steps.bench([str(f) for f in files.values()], batch_size=batch, seq_len=128, threads=1, rounds=count,
                           warmup=1)
        out.update({(name, runtime, batch): row["cpu_median_ms"] for (name, runtime), row in zip(files, rows)})
    return out


def latency_table(models: list[str], times: dict, rounds: dict[int, int], base: str,
                  extra: dict[str, list[str]]) -> str:
    headers = ["model", *extra["headers"]]
    for runtime in RUNTIMES:
        for batch in rounds:
            headers += [f"{runtime} b{batch} ms", f"{runtime} b{batch} speed-up"]
    rows = []
    for name in models:
        row = [name, *extra[name]]
        for runtime in RUNTIMES:
            for batch in rounds:
                ms = times[(name, runtime, batch)]
                row += [f"{ms:.1f}", f"{times[(base, 'pytorch', batch)] / ms:.2f}x"]
        rows.append(row)
    return common.markdown_table(headers, rows)


def head_to_head(times: dict, rounds: dict[int, int], drop: str, prune: str) -> str:
    """prune's latency over drop-layers', per runtime and batch (above 1: dropping layers is faster)."""
    cells = [f"{runtime} b{batch}: {times[(prune, runtime, batch)] / times[(drop, runtime, batch)]:.2f}x"
             for runtime in RUNTIMES for batch in rounds]
    return f"{prune} latency / {drop} latency: " + ", ".join(cells) + "."


# ----- part 1: BERT-base latency ---------------------------------------------------------------
def latency_part(args, rounds: dict[int, int]) -> str:
    from ghostify import steps

    layers = 2 if args.quick else 12
    work = args.work / "latency"
    dense = work / "dense"
    if not dense.is_dir():
        common.bert_base(layers=layers).save_pretrained(dense)
    models = {"dense": dense, f"drop-layers --keep {layers // 2}": work / "dropped",
              "prune --width 6/12": work / "pruned"}
    if not models[f"drop-layers --keep {layers // 2}"].is_dir():
        steps.drop_layers(dense, work / "dropped", keep=layers // 2)
    if not models["prune --width 6/12"].is_dir():
        steps.prune(dense, work / "pruned", width="6/12")
    sizes = {name: steps.info(path) for name, path in models.items()}
    extra = {"headers": ["layers", "heads / FFN per layer", "GFLOPs (b1)", "FLOP ratio"]}
    for name, info in sizes.items():
        extra[name] = [str(len(info["heads_per_layer"])), f"{info['heads_per_layer'][0]} / {info['ffn_per_layer'][0]}",
                       f"{info['flops'] / 1e9:.2f}", f"{sizes['dense']['flops'] / info['flops']:.2f}x"]
    times = timed(models, rounds, work / "onnx")
    note = (f"{'**2 layers only (smoke test)**, ' if args.quick else ''}BertForSequenceClassification of the default "
            f"BertConfig() (random init), seq 128, no padding, 1 thread; median CPU ms per forward pass over "
            + ", ".join(f"{r} rounds at batch {b}" for b, r in rounds.items())
            + " (models take turns within each round); speed-up = dense PyTorch / model, in the same batch.")
    table = latency_table(list(models), times, rounds, "dense", extra)
    versus = head_to_head(times, rounds, f"drop-layers --keep {layers // 2}", "prune --width 6/12")
    return f"## Same FLOPs, depth or width: BERT-base\n\n{note}\n\n{table}\n\n{versus}\n"


# ----- part 2: the quickstart chain on MiniLM / SST-2 ------------------------------------------
def real_part(args, rounds: dict[int, int]) -> str:
    import yaml

    from ghostify import recipe as recipes

    quickstart = REPO / "recipes" / "quickstart.yaml"
    overrides = [f"model={args.minilm}", f"data.dataset={args.glue}"]
    if args.quick:
        overrides += ["vars.samples=64", "importance.samples=32"]
    prune_run = args.work / "real-prune"
    common.stderr_log("quickstart as shipped (prune --width 6/12)")
    pruned = recipes.run(recipes.load(quickstart, overrides), prune_run)
    # the same chain from the same scored teacher, drop-layers --keep 3 in prune's place
    raw = yaml.safe_load(quickstart.read_text())
    stages = raw["stages"]
    at = next(i for i, s in enumerate(stages) if "prune" in s)
    stage = {row["command"]: prune_run / row["stage"] for row in reversed(pruned["stages"])}  # the first of each
    teacher, scored = stage["finetune"], stage["importance"]
    drop = {**{k: v for k, v in raw.items() if k != "stages"}, "model": str(scored), "teacher": str(teacher),
            "stages": _with_teacher([{"drop-layers": {"keep": 3}}, *stages[at + 1:]], str(teacher))}
    drop["data"] = {**raw["data"], "dataset": str(args.glue)}
    drop["vars"] = {**raw["vars"], **({"samples": 64} if args.quick else {})}
    path = args.work / "quickstart-drop-layers.yaml"
    path.write_text(yaml.safe_dump(drop, sort_keys=False))
    common.stderr_log("the same chain with drop-layers --keep 3")
    dropped = recipes.run(recipes.load(path), args.work / "real-drop")

    def final(report, run: Path) -> tuple[Path, dict[str, float]]:
        rows = report["stages"]
        evals = [r for r in rows if r["command"] == "eval"]  # the final model's, then its int8 export's
        model = next(r for r in rows if r["stage"].endswith("final"))
        return run / model["stage"], {"pytorch": evals[0]["metrics"]["accuracy"],
                                      "onnx int8": evals[-1]["metrics"]["accuracy"]}

    (p_model, p_acc), (d_model, d_acc) = final(pruned, prune_run), final(dropped, args.work / "real-drop")
    models = {"teacher (6 layers, 12 heads)": teacher, "prune --width 6/12": p_model, "drop-layers --keep 3": d_model}
    times = timed(models, rounds, args.work / "real-onnx")
    from ghostify import steps

    extra = {"headers": ["layers", "GFLOPs (b1)", "accuracy", "int8 accuracy"]}
    for name, path in models.items():
        info = steps.info(path)
        acc = {"prune --width 6/12": p_acc, "drop-layers --keep 3": d_acc}.get(name)
        extra[name] = [str(len(info["heads_per_layer"])), f"{info['flops'] / 1e9:.2f}",
                       f"{acc['pytorch']:.4f}" if acc else "-", f"{acc['onnx int8']:.4f}" if acc else "-"]
    kept = steps.info(d_model)["methods"]["dropped_layers"]["kept"]
    note = (f"{'**64 examples only (smoke test)**, ' if args.quick else ''}recipes/quickstart.yaml on all-MiniLM-L6-v2 "
            f"and SST-2 (validation accuracy), one seed; drop-layers kept layers {','.join(map(str, kept))} of 6 by "
            "the importance stage's layer scores; latency as above (seq 128, 1 thread, CPU ms), speed-up against the "
            "teacher.")
    table = latency_table(list(models), times, rounds, "teacher (6 layers, 12 heads)", extra)
    versus = head_to_head(times, rounds, "drop-layers --keep 3", "prune --width 6/12")
    return f"## The quickstart chain: MiniLM on SST-2\n\n{note}\n\n{table}\n\n{versus}\n"


def _with_teacher(value, teacher: str):
    """``value`` with the quickstart's ``${teacher}`` (its first stage's output) replaced by ``teacher``."""
    if isinstance(value, dict):
        return {k: _with_teacher(v, teacher) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_teacher(v, teacher) for v in value]
    return teacher if value == "${teacher}" else value


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    args.work.mkdir(parents=True, exist_ok=True)
    rounds = {1: 2, 32: 1} if args.quick else dict(zip((1, 32), args.rounds))
    info = common.machine_info()
    parts = []
    if args.part in ("both", "latency"):
        parts.append(latency_part(args, rounds))
    if args.part in ("both", "real"):
        parts.append(real_part(args, rounds))
    common.finish_info(info)
    given = argv if argv is not None else sys.argv[1:]
    command = "python benchmarks/drop_layers.py " + " ".join(shlex.quote(a) for a in given)
    report = (f"# drop-layers against prune\n\nCommand: `{command}`\n\nMachine: {common.machine_line(info)}\n\n"
              + "\n".join(parts))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
