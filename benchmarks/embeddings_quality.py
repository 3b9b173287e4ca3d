"""How much of a sentence-embedding model's STS-B quality survives compression (issue 14).

``all-MiniLM-L6-v2`` (../shared) is scored label-free, pruned to 6/12 and 3/12, given ghost modules
(or not), and distilled from the original on at most 20,000 unlabeled sentences: the layer-wise
losses plus the pooled-embedding loss (``--logit-weight``, cosine). The sentences (``--text``):

* ``stsb`` (the default, as in ``recipes/embeddings-minilm.yaml``): both sentences of every STS-B
  *training* pair (11,498 sentences; the scores are not read, validation text is never seen);
* ``glue``: the unique training sentences of STS-B, MRPC and RTE, shuffled with seed 0 and written
  to one ``.txt`` file (20,000 of 22,106);
* ``sst2``: SST-2's training sentences (movie-review fragments, far from STS-B's news, captions
  and forums).

Every model is evaluated on the STS-B validation pairs (Spearman of cosine similarities,
no fine-tuning) and by retrieval (recall@10, MRR@10 of each first sentence of a pair scored >= 4
retrieving its second), through ``ghostify eval --task embeddings``.

    python benchmarks/embeddings_quality.py --work /tmp/emb-quality          # ~40 min on 2 cores
    python benchmarks/embeddings_quality.py --work /tmp/emb-quality --quick  # smoke test
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="directory for the checkpoints (created)")
    parser.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    parser.add_argument("--glue", default=str(SHARED / "data" / "glue"))
    parser.add_argument("--sentences", type=int, default=20000, help="unlabeled training sentences")
    parser.add_argument("--text", choices=("stsb", "glue", "sst2"), default="stsb",
                        help="stsb: STS-B training sentences; glue: STS-B+MRPC+RTE training sentences; sst2: SST-2's")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--logit-weight", type=float, default=1.0, help="weight of the pooled-embedding loss")
    parser.add_argument("--variants", default="6/12+ghost,3/12+ghost,3/12", help="width[+ghost], comma-separated")
    parser.add_argument("--quick", action="store_true", help="smoke test: 256 sentences, 1 epoch, 200 STS-B pairs")
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.epochs = 256, 1
    from ghostify import steps

    warnings.simplefilter("ignore")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.text == "sst2":
        sentences = dict(task="embeddings", dataset=f"{args.glue}/sst2", text_columns=("sentence",), max_length=64)
    elif args.text == "stsb":  # a row is a pair: two sentences
        sentences = dict(task="embeddings", dataset=f"{args.glue}/stsb", text_columns=("sentence1", "sentence2"),
                         max_length=64)
    else:
        sentences = dict(task="embeddings", dataset=str(glue_sentences(args.glue, work / "glue-train.txt")),
                         text_columns=("text",), max_length=64)
    sts = dict(task="embeddings", dataset=f"{args.glue}/stsb", text_columns=("sentence1", "sentence2"), max_length=64,
               max_samples=200 if args.quick else None)

    def evaluate(model) -> dict:
        return steps.evaluate(model, **sts)["metrics"]

    results = {"original": {**evaluate(args.model), "params": steps.info(args.model)["params"]}}
    print(json.dumps({"original": results["original"]}), flush=True)
    scored = work / "scored"
    if not scored.exists():
        steps.importance(args.model, scored, **sentences, samples=256 if args.quick else 2048, seed=0)
    for variant in args.variants.split(","):
        width, ghost = variant.split("+")[0], variant.endswith("+ghost")
        name = variant.replace("/", "-").replace("+", "-")
        pruned, student, final = work / f"{name}-pruned", work / f"{name}-student", work / f"{name}-distilled"
        started = time.perf_counter()
        if not pruned.exists():
            steps.prune(scored, pruned, width=width)
        if not student.exists():
            if ghost:
                steps.attach_ghost(pruned, student, seed=0)
            else:
                student = pruned
        if not final.exists():
            rows = args.sentences // len(sentences["text_columns"])
            steps.distill(args.model, student, final, **sentences, max_samples=rows, epochs=args.epochs,
                          batch_size=32, learning_rate=args.learning_rate, logit_weight=args.logit_weight, seed=0)
        results[variant] = {**evaluate(final), "params": steps.info(final)["params"],
                            "minutes": round((time.perf_counter() - started) / 60, 1)}
        results[variant]["kept"] = results[variant]["spearman"] / results["original"]["spearman"]
        print(json.dumps({variant: results[variant]}), flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print("| model | params | STS-B Spearman | kept | recall@10 | MRR@10 |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        kept = f"{100 * r['kept']:.1f}%" if "kept" in r else "100%"
        print(f"| {name} | {r['params'] / 1e6:.1f}M | {r['spearman']:.4f} | {kept} | {r['recall@10']:.3f} | {r['mrr@10']:.3f} |")


def glue_sentences(glue: str, path: Path) -> Path:
    """Unique training sentences of STS-B, MRPC and RTE, shuffled with seed 0, one per line."""
    if path.exists():
        return path
    import random

    import datasets

    seen: dict[str, None] = {}
    for config, columns in (("stsb", ("sentence1", "sentence2")), ("mrpc", ("sentence1", "sentence2")),
                            ("rte", ("sentence1", "sentence2"))):
        rows = datasets.load_dataset(glue, config, split="train")
        for column in columns:
            for text in rows[column]:
                text = " ".join(text.split())
                if text:
                    seen.setdefault(text, None)
    texts = list(seen)
    random.Random(0).shuffle(texts)
    path.write_text("\n".join(texts) + "\n")
    return path


if __name__ == "__main__":
    main()
