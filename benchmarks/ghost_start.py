"""How far attach-ghost moves a model, and how fast distillation brings it back (issue 15).

On the unpruned ``all-MiniLM-L6-v2`` (../shared), for each ``attach-ghost --init``, right after
attaching and after one short distillation from the original model:

* the relative change of every layer's output, ``‖h' − h‖ / ‖h‖`` over the real tokens of 64
  STS-B validation sentences (h: the original model's hidden states);
* the mean cosine between the embeddings of unrelated sentences (the first sentences of 64
  different pairs): a collapsed model maps everything to one direction (cosine near 1);
* STS-B validation Spearman of cosine similarities (500 pairs, no fine-tuning).

The distillation is the issue's: 1 epoch on 1,000 SST-2 training sentences, batch 32, lr 2e-4,
layer-wise losses plus 1 − cos of the pooled embeddings.

    python benchmarks/ghost_start.py --work /tmp/ghost-start          # about 4 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, machine_line  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
INITS = ("uniform", "center", "zero-scale")


def layer_changes_and_collapse(model_dir: Path, reference: list[torch.Tensor], texts: list[str]) -> tuple[list[float], float, list[torch.Tensor]]:
    """Per-layer relative change against ``reference`` (empty: return this model's states as the
    reference), and the mean off-diagonal cosine of the pooled embeddings."""
    from transformers import AutoTokenizer

    from ghostify.checkpoint import load_model
    from ghostify.tasks.embeddings import pooling_of

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = load_model(model_dir).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    real = batch["attention_mask"].bool()
    states = [h[real] for h in out.hidden_states[1:]]
    changes = [float((s - r).norm() / r.norm()) for s, r in zip(states, reference)] if reference else []
    pooled = pooling_of(model_dir)(out.last_hidden_state, batch["attention_mask"])
    pooled = torch.nn.functional.normalize(pooled, dim=-1)
    cosines = pooled @ pooled.T
    n = len(texts)
    off_diagonal = float((cosines.sum() - cosines.diagonal().sum()) / (n * (n - 1)))
    return changes, off_diagonal, states


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="directory for the checkpoints (created)")
    parser.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    parser.add_argument("--glue", default=str(SHARED / "data" / "glue"))
    parser.add_argument("--inits", default=",".join(INITS))
    parser.add_argument("--sentences", type=int, default=1000, help="distillation sentences (SST-2 train)")
    args = parser.parse_args(argv)
    import datasets

    from ghostify import steps

    warnings.simplefilter("ignore")
    args.work.mkdir(parents=True, exist_ok=True)
    sts = dict(task="embeddings", dataset=f"{args.glue}/stsb", text_columns=("sentence1", "sentence2"),
               max_length=64, max_samples=500)
    texts = datasets.load_dataset(args.glue, "stsb", split="validation")["sentence1"][:64]

    def spearman(model) -> float:
        return steps.evaluate(model, **sts)["metrics"]["spearman"]

    _, cosine, reference = layer_changes_and_collapse(Path(args.model), [], texts)
    rows = [{"model": "original", "stage": "-", "layer_change": [], "cosine": cosine, "spearman": spearman(args.model)}]
    for init in args.inits.split(","):
        ghost, distilled = args.work / f"ghost-{init}", args.work / f"ghost-{init}-distilled"
        if not ghost.exists():
            steps.attach_ghost(args.model, ghost, init=init, seed=0)
        if not distilled.exists():
            steps.distill(args.model, ghost, distilled, task="embeddings", dataset=f"{args.glue}/sst2",
                          text_columns=("sentence",), max_samples=args.sentences, max_length=64, epochs=1,
                          batch_size=32, learning_rate=2e-4, logit_weight=1.0, seed=0)
        for stage, path in (("attached", ghost), ("distilled", distilled)):
            changes, cosine, _ = layer_changes_and_collapse(path, reference, texts)
            rows.append({"model": f"12/12 + ghosts, --init {init}", "stage": stage, "layer_change": changes,
                         "cosine": cosine, "spearman": spearman(path)})
            print(json.dumps(rows[-1]), flush=True)
    (args.work / "results.json").write_text(json.dumps(rows, indent=2))
    print(f"\nMachine: {machine_line(machine_info())}\n")
    print("| model | stage | layer output change (layers 1..L) | cosine of unrelated sentences | STS-B Spearman |")
    print("|---|---|---|---|---|")
    for r in rows:
        change = ", ".join(f"{100 * c:.0f}%" for c in r["layer_change"]) or "–"
        print(f"| {r['model']} | {r['stage']} | {change} | {r['cosine']:.3f} | {r['spearman']:.4f} |")


if __name__ == "__main__":
    main()
