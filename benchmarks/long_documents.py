"""Long documents (issue 27): accuracy and latency per document of truncation against --chunks.

Accuracy: `ghostify eval` (``steps.evaluate``) on the whole validation split, truncating at
--max-length or windowing with --chunks mean|max (windows overlap by --doc-stride). Latency,
``ghostify bench``-style: one thread, the model's forward on one document's rows (one truncated
row, or all its windows as one batch padded to the longest, as eval batches them), the settings
taking turns within each round, CPU milliseconds (process_time: the machine is shared) and the
median over rounds per document, then the mean over a seeded sample of documents. Tokenising is
not timed.

    OMP_NUM_THREADS=1 python benchmarks/long_documents.py out/bbc-minilm \
        --dataset ../shared/data/bbc_news --text-column text --label-column label_name \
        --lengths 128,256 --stride 32 --documents 40
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from ghostify import steps
from ghostify.checkpoint import load_model
from ghostify.data import load_split, resolve_task
from ghostify.settings import DataSettings, TaskSettings
from ghostify.steps.common import load_tokenizer


def accuracy(model: str, args, length: int, chunks: str | None) -> dict:
    data = DataSettings(dataset=args.dataset, text_columns=(args.text_column,), label_column=args.label_column,
                        max_length=length)
    result = steps.evaluate(model, data=data, task_settings=TaskSettings(chunks=chunks, doc_stride=args.stride))
    return {"accuracy": result["metrics"]["accuracy"], "documents": result["samples"],
            "windows": result.get("windows", result["samples"])}


def document_batch(tokenizer, text: str, length: int, stride: int | None) -> dict[str, torch.Tensor]:
    windows = {} if stride is None else {"stride": stride, "return_overflowing_tokens": True}
    encoded = tokenizer([text], truncation=True, max_length=length, **windows)
    encoded.pop("overflow_to_sample_mapping", None)
    return dict(tokenizer.pad(dict(encoded), return_tensors="pt"))


def latency(model: str, args, lengths: list[int]) -> dict[str, float]:
    torch.set_num_threads(1)
    net, tokenizer = load_model(model).eval(), load_tokenizer(model)
    preset = resolve_task(None, text_columns=(args.text_column,), label_column=args.label_column)
    texts = list(load_split(args.dataset, preset, "validation").rows[args.text_column])
    texts = random.Random(0).sample(texts, min(args.documents, len(texts)))
    settings = [(f"{mode}@{n}", n, None if mode == "truncate" else args.stride) for n in lengths
                for mode in ("truncate", "chunks")]
    per_setting: dict[str, list[float]] = {name: [] for name, _, _ in settings}
    for text in texts:
        batches = [(name, document_batch(tokenizer, text, n, stride)) for name, n, stride in settings]
        times: dict[str, list[float]] = {name: [] for name, _ in batches}
        with torch.inference_mode():
            for round_ in range(args.warmup + args.rounds):
                for name, batch in batches:
                    start = time.process_time()
                    net(**batch)
                    if round_ >= args.warmup:
                        times[name].append(1000 * (time.process_time() - start))
        for name, values in times.items():
            per_setting[name].append(statistics.median(values))
    return {name: statistics.mean(values) for name, values in per_setting.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--lengths", default="128,256")
    parser.add_argument("--stride", type=int, default=32)
    parser.add_argument("--documents", type=int, default=40, help="documents timed (a seeded sample)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    torch.set_num_threads(1)
    ms = latency(args.model, args, lengths)
    rows = []
    for n in lengths:
        for chunks in (None, "mean", "max"):
            row = {"max_length": n, "mode": chunks or "truncate",
                   "ms_per_document": ms[f"{'truncate' if chunks is None else 'chunks'}@{n}"]}
            if not args.skip_accuracy:
                row.update(accuracy(args.model, args, n, chunks))
            rows.append(row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
