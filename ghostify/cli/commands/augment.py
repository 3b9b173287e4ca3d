from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ...settings import AugmentDefaults, DataSettings
from ..app import app
from ..console import err, progress
from ..options import Dataset, LabelColumn, MaxLength, MaxSamples, Overwrite, Seed, Task, TextColumns, split_columns

DataOutput = Annotated[
    Path,
    typer.Option("--output", "-o", help="Dataset directory to write (must not exist unless --overwrite; never inside the input).", show_default=False),
]


@app.command(
    epilog="Examples:\n\n"
    "ghostify augment --mlm bert-base-uncased --task sst2 -o data/sst2-aug\n\n"
    "ghostify augment --mlm bert-base-uncased --task rte --dataset ../shared/data/glue -o data/rte-aug --max-samples 500\n\n"
    "ghostify augment --mlm bert-base-uncased --task stsb --label-with out/teacher-stsb -o data/stsb-aug\n\n"
    "ghostify augment --mlm roberta-base --dataset ./my_data --text-columns text --label-column y -o data/mine-aug\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/d --task sst2 --dataset data/sst2-aug"
)
def augment(
    mlm: Annotated[str, typer.Option("--mlm", help="Masked-LM checkpoint (…ForMaskedLM: a directory or hub id) that proposes the replacement words; it needs its tokenizer.", show_default=False)],
    output: DataOutput,
    task: Task = None,
    dataset: Dataset = DataSettings.dataset,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    per_example: Annotated[Optional[int], typer.Option("--per-example", min=1, help="New examples per training example (N); default from the task as in TinyBERT: 20 for sst2/qnli, 10 for mnli/qqp, 30 otherwise.", show_default=False)] = None,
    replace_prob: Annotated[float, typer.Option("--replace-prob", min=0.0, max=1.0, help="Probability p that each replaceable word is replaced in a new example.")] = AugmentDefaults.replace_prob,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Candidates per word: the masked LM's K most likely whole words.")] = AugmentDefaults.top_k,
    label_with: Annotated[Optional[str], typer.Option("--label-with", help="Label the new examples with this fine-tuned classifier's predictions (argmax; the value for regression) instead of copying the original's label.", show_default=False)] = None,
    max_samples: MaxSamples = None,
    max_length: MaxLength = DataSettings.max_length,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Sequences per forward pass (masked copies for the MLM, new examples for --label-with).")] = AugmentDefaults.batch_size,
    seed: Seed = AugmentDefaults.seed,
    overwrite: Overwrite = False,
) -> None:
    """Augment a task's training data TinyBERT-style with a masked language model.

    Each text is split into words by the MLM tokenizer's own pre-tokenisation. A word is
    *replaceable* when it is a single word-piece, alphabetic, not a stop word (NLTK's English list
    plus TinyBERT's "'s", "'re"; negations are stop words) and within the first --max-length tokens.
    Each replaceable word is masked in its own copy of the text, paired with the unmasked text as
    in TinyBERT (`[CLS] masked [SEP] original [SEP]`), and the MLM's top-K whole-word predictions
    (alphabetic, no stop words, special tokens, sub-word pieces or the word itself) become its
    candidates; all masked copies of many texts run batched. Words of several word-pieces are
    kept unchanged (TinyBERT used GloVe neighbours there, which ghostify does not ship).

    Every training example then gets N draws in which each replaceable word is replaced with
    probability p by a uniformly chosen candidate (lower-case candidates take the word's case);
    sentence pairs are augmented in every text column at once. As in TinyBERT, a draw equal to the
    original or to an earlier draw is dropped, so an example can get fewer than N (none when it has
    no replaceable word).

    OUT is a dataset directory (`datasets.save_to_disk`) that `--dataset OUT` reads: `train` holds
    each original (kept, with its gold label) followed by its new versions, with the input's
    columns plus a bool `augmented`; every other split (validation, test) is copied unchanged;
    `augment.json` records the source, the settings, the counts and the versions. Labels of new
    examples are copied from the original, or predicted by --label-with. For a regression task
    (stsb) copied scores are only a rough guess, hence a warning: distillation does not use them,
    fine-tuning does.

    The seed picks the --max-samples subset and each example's random stream (seeded by its
    position), so the same command gives a byte-identical directory. The draws do not depend on
    --batch-size; it only changes the float rounding of the MLM's scores (through padding), which
    could reorder two candidates that tie to the last bit.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    with progress("augmenting", max_samples) as bar:
        job = bar.add_task("augmenting", total=max_samples)

        def advance(n: int, total: int) -> None:
            bar.update(job, total=total, advance=n)

        result = steps.augment(
            mlm,
            output,
            dataset=dataset,
            task=task,
            text_columns=split_columns(text_columns),
            label_column=label_column,
            per_example=per_example,
            replace_prob=replace_prob,
            top_k=top_k,
            label_with=label_with,
            max_samples=max_samples,
            max_length=max_length,
            batch_size=batch_size,
            seed=seed,
            overwrite=overwrite,
            progress=advance,
        )
    for original, variant in result.examples:
        err.print(f"[dim]{escape(' | '.join(original))}[/dim]\n  → {escape(' | '.join(variant))}")
    splits = ", ".join(f"{name} {rows:,}" for name, rows in result.splits.items())
    err.print(
        f"{result.originals:,} examples + {result.augmented:,} new ({result.duplicates:,} duplicate draws dropped; "
        f"labels {result.labels}) in {result.seconds:.1f}s: {splits}"
    )
    err.print(f"wrote {output}")

