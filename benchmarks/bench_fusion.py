"""Does ONNX Runtime's attention fusion pay on ghostify's ONNX exports? Unfused (what ``ghostify
export --format onnx`` writes) vs fused (one ``com.microsoft.Attention`` node per layer, from
``onnxruntime.transformers.optimizer.optimize_model``), fp32 and int8, side by side.

ONNX Runtime's optimizer fuses nothing of today's exports: transformers 5 reshapes heads with
``-1`` (the optimizer cannot read the head count), masks with a boolean ``Where`` (SDPA) or a
``Mul``-scaled score plus mask whose two ``Mul`` parents it confuses (eager), and the dynamo
exporter folds the mask's two ``Unsqueeze`` into one. The fused graphs here are made by (1) an
export-only attention kernel (scores ``Div``ided by ``1/scaling``, plus an additive mask) fed the
classic additive mask ``(1 - mask[:, None, None, :]) * min``, (2) pinning each layer's integer head
count (its query projection's width / head size) into the reshapes, (3) splitting the mask's
``Unsqueeze`` in two, then ``optimize_model(model_type="bert", num_heads=0, hidden_size=0)``.
Every fused graph is checked: one ``Attention`` per layer, and its outputs against the unfused
export's (padded batches). int8 is ``ghostify``'s dynamic quantisation applied after fusion
(``Attention`` becomes ``QAttention``).

A randomly initialised BERT-base-sized classifier (speed does not depend on the weights), dense
and pruned with ``ghostify prune`` (magnitude scores, uniform allocation). Sequence 128, no
padding; variants take turns within each round (the starting one rotates); medians. At 1 thread
the CPU time (``process_time``) per forward pass, at 2 threads also the wall clock.

    python benchmarks/bench_fusion.py --work /tmp/bench-fusion              # ~10 min on 2 cores
    python benchmarks/bench_fusion.py --work /tmp/bench-fusion --quick      # smoke test (2 layers)
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

WIDTHS = ("12/12", "3/12")
KERNEL = "ghostify-fusable"  # the export-only attention kernel's name in transformers' registry
#: the largest difference the fused graph may show from the unfused one
TOLERANCE = 1e-4


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="directory for the checkpoints and exports (reused)")
    p.add_argument("--rounds", type=int, nargs=2, default=(10, 3), metavar=("BATCH1", "BATCH32"))
    p.add_argument("--widths", nargs="+", choices=WIDTHS, default=list(WIDTHS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--quick", action="store_true", help="2 layers, 2 rounds: checks that the script runs")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    return p.parse_args(argv)


# ----- the fused export ------------------------------------------------------------------------
def fusable_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention in the shape ONNX Runtime's BERT fusion matches: ``Softmax(Div(MatMul) + mask)``
    (transformers' ``* scaling`` gives the score and the mask two ``Mul`` parents, which it confuses)."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) / (1.0 / scaling)
    if attention_mask is not None:
        scores = scores + attention_mask
    out = torch.matmul(F.softmax(scores, dim=-1), value)
    return out.transpose(1, 2).contiguous(), None


def register_kernel() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(KERNEL, fusable_attention)
    AttentionMaskInterface.register(KERNEL, eager_mask)


class AdditiveMaskGraph(torch.nn.Module):
    """The classifier with the classic additive mask ``(1 - mask[:, None, None, :]) * min`` (a 4-D
    mask, which transformers passes through as it is)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        additive = (1.0 - attention_mask.unsqueeze(1).unsqueeze(2).to(torch.float32)) * torch.finfo(torch.float32).min
        return (self.model(input_ids=input_ids, attention_mask=additive, token_type_ids=token_type_ids).logits,)


def export_fusable(model, path: Path) -> None:
    from ghostify.export.onnx import example_batch

    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    model.set_attn_implementation(KERNEL)
    graph = AdditiveMaskGraph(model.eval())
    example = example_batch(model.config, inputs, 2, 8, seed=0)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, tuple(example.values()), str(path), dynamo=True,
                          dynamic_shapes={n: {0: batch, 1: sequence} for n in inputs},
                          input_names=inputs, output_names=["logits"], verbose=False)


def pin_heads(source: Path, target: Path) -> int:
    """Each ``Reshape(Add(MatMul(x, W)), Concat(b, l, -1, d))`` gets ``W``'s width / d heads instead of -1;
    the mask's two-axis ``Unsqueeze`` is split in two. Returns how many reshapes were pinned."""
    import onnx
    from onnx import helper, numpy_helper
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = OnnxModel(onnx.load(str(source)))
    pinned = 0
    for node in list(model.nodes()):
        if node.op_type == "Reshape":
            concat, add = model.get_parent(node, 1), model.get_parent(node, 0)
            if concat is None or concat.op_type != "Concat" or len(concat.input) != 4:
                continue
            if add is None or add.op_type != "Add":
                continue
            heads, size = model.get_constant_value(concat.input[2]), model.get_constant_value(concat.input[3])
            matmul = next((p for p in model.get_parents(add) if p.op_type == "MatMul"), None)
            weight = model.get_constant_value(matmul.input[1]) if matmul is not None else None
            if heads is None or size is None or heads.size != 1 or size.size != 1 or int(heads.flat[0]) != -1:
                continue
            if weight is None or weight.ndim != 2 or weight.shape[1] % int(size.flat[0]):
                continue
            name = node.name + "_heads"
            model.add_initializer(numpy_helper.from_array(np.array([weight.shape[1] // int(size.flat[0])]), name))
            model.add_node(helper.make_node("Concat", [*concat.input[:2], name, concat.input[3]], [name + "_shape"],
                                            name=name + "_concat", axis=0))
            node.input[1] = name + "_shape"
            pinned += 1
        elif node.op_type == "Unsqueeze" and node.input[0] == "attention_mask":
            axes = model.get_constant_value(node.input[1])
            if axes is not None and axes.size == 2:
                first, second = sorted(int(a) for a in axes.flat)
                name = node.name + "_split"
                model.add_initializer(numpy_helper.from_array(np.array([first]), name + "_axes"))
                model.add_initializer(numpy_helper.from_array(np.array([second]), name + "_axes_2"))
                model.add_node(helper.make_node("Unsqueeze", [node.input[0], name + "_axes"], [name], name=name))
                node.input[0], node.input[1] = name, name + "_axes_2"
    model.topological_sort()
    model.prune_graph()
    model.save_model_to_file(str(target))
    return pinned


def fuse(source: Path, target: Path) -> collections.Counter:
    from onnxruntime.transformers.optimizer import optimize_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = optimize_model(str(source), model_type="bert", num_heads=0, hidden_size=0)
    optimized.save_model_to_file(str(target))
    return collections.Counter(n.op_type for n in optimized.model.graph.node)


def max_difference(a: Path, b: Path, config) -> float:
    """The largest difference of the two graphs' outputs on padded batches."""
    from ghostify.export.onnx import example_batch
    from ghostify.runtimes.onnx import OrtSession

    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    first, second = OrtSession(a).session, OrtSession(b).session
    worst = 0.0
    for batch in (example_batch(config, inputs, 3, 13, seed=1), example_batch(config, inputs, 5, 21, seed=3)):
        feeds = {k: v.numpy() for k, v in batch.items()}
        for x, y in zip(first.run(None, feeds), second.run(None, feeds), strict=True):
            worst = max(worst, float(np.abs(x - y).max()))
    return worst


# ----- building --------------------------------------------------------------------------------
def build(work: Path, layers: int, width: str) -> dict[str, Path]:
    """The four graphs of ``width``: unfused/fused x fp32/int8 (created once)."""
    from ghostify import steps
    from ghostify.checkpoint import load_model
    from ghostify.runtimes.onnx import quantize_int8

    dense = work / "12-12"
    if not dense.is_dir():
        common.bert_base(layers=layers).save_pretrained(dense)
    checkpoint = dense if width == "12/12" else work / width.replace("/", "-")
    if not checkpoint.is_dir():
        steps.prune(dense, checkpoint, width=width)
    unfused = checkpoint.with_name(checkpoint.name + "-onnx")
    if not (unfused / "model_int8.onnx").is_file():
        steps.export(checkpoint, unfused, format="onnx", quantize="int8", overwrite=True)
    fused = checkpoint.with_name(checkpoint.name + "-fused")
    if not (fused / "model_int8.onnx").is_file():
        fused.mkdir(exist_ok=True)
        model = load_model(checkpoint)
        export_fusable(model, fused / "raw.onnx")
        pinned = pin_heads(fused / "raw.onnx", fused / "pinned.onnx")
        ops = fuse(fused / "pinned.onnx", fused / "model.onnx")
        layers_n = model.config.num_hidden_layers
        difference = max_difference(unfused / "model.onnx", fused / "model.onnx", model.config)
        common.stderr_log(f"{width}: {pinned} reshapes pinned, {ops['Attention']} Attention nodes for {layers_n} "
                          f"layers, fused vs unfused {difference:.1e}")
        if ops["Attention"] != layers_n or difference > TOLERANCE:
            raise SystemExit(f"{width}: fusion failed ({ops['Attention']} Attention nodes, "
                             f"difference {difference:.1e})")
        quantize_int8(fused / "model.onnx", fused / "model_int8.onnx")
        import onnx
        q = collections.Counter(n.op_type for n in onnx.load(str(fused / "model_int8.onnx")).graph.node)
        common.stderr_log(f"{width} int8: {q['QAttention']} QAttention, {q['Attention']} Attention nodes")
    return {("unfused", "fp32"): unfused / "model.onnx", ("unfused", "int8"): unfused / "model_int8.onnx",
            ("fused", "fp32"): fused / "model.onnx", ("fused", "int8"): fused / "model_int8.onnx"}


# ----- timing ----------------------------------------------------------------------------------
def time_sessions(files: dict, batch: int, threads: int, rounds: int) -> dict:
    """Median CPU time and wall clock (ms) per forward pass of each file, taking turns."""
    from ghostify.runtimes.onnx import OrtSession

    sessions = {key: OrtSession(path, threads=threads, spinning=False).session for key, path in files.items()}
    data = common.random_batch(batch, 128, labels=False)
    feeds = {"input_ids": data["input_ids"].numpy(), "attention_mask": data["attention_mask"].numpy(),
             "token_type_ids": np.zeros_like(data["input_ids"].numpy())}
    keys = list(sessions)
    cpu, wall = {k: [] for k in keys}, {k: [] for k in keys}
    for r in range(rounds + 1):  # the first round warms up
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            c, w = time.process_time(), time.perf_counter()
            sessions[key].run(None, feeds)
            if r:
                cpu[key].append(1000 * (time.process_time() - c))
                wall[key].append(1000 * (time.perf_counter() - w))
    return {k: (common.median(cpu[k]), common.median(wall[k])) for k in keys}


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    register_kernel()
    args.work.mkdir(parents=True, exist_ok=True)
    layers = 2 if args.quick else 12
    rounds = {1: 2, 32: 1} if args.quick else dict(zip((1, 32), args.rounds))
    info = common.machine_info()
    files = {}
    for width in args.widths:
        for (fusion, precision), path in build(args.work, layers, width).items():
            files[(width, precision, fusion)] = path
    results = {}
    for batch in args.batches:
        for threads in args.threads:
            common.stderr_log(f"timing batch {batch}, {threads} thread(s), {rounds.get(batch, 3)} rounds")
            results[(batch, threads)] = time_sessions(files, batch, threads, rounds.get(batch, 3))
    common.finish_info(info)
    print(f"Machine: {common.machine_line(info)}\n")
    print("ms per forward pass (median): CPU time at 1 thread, wall clock at 2 threads; "
          "gain = unfused / fused - 1.\n")
    headers = ["width", "precision"]
    for batch, threads in results:
        headers += [f"b{batch} {threads}t unfused", "fused", "gain"]
    rows = []
    for width in args.widths:
        for precision in ("fp32", "int8"):
            row = [width, precision]
            for (batch, threads), times in results.items():
                pick = 0 if threads == 1 else 1
                u, f = times[(width, precision, "unfused")][pick], times[(width, precision, "fused")][pick]
                row += [f"{u:.1f}", f"{f:.1f}", f"{100 * (u / f - 1):+.0f}%"]
            rows.append(row)
    print(common.markdown_table(headers, rows))
    if args.json:
        common.write_json(args.json, {"machine": info, "results": {
            f"b{b} t{t}": {" ".join(k): {"cpu_ms": v[0], "wall_ms": v[1]} for k, v in times.items()}
            for (b, t), times in results.items()}})


if __name__ == "__main__":
    main()
