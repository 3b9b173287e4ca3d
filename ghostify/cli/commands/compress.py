from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...latency_model import RUNTIMES, Deployment
from ...settings import BUDGETS, CompressDefaults, DataSettings, TaskSettings, TeacherStoreSettings
from ..app import app
from ..console import err, out, print_json
from ..options import Json, Model, Seed
from ..settings_options import settings_options


@app.command(
    epilog="Examples:\n\n"
    "ghostify compress ../shared/models/all-MiniLM-L6-v2 -o out/c2 --task sst2 --dataset ../shared/data/glue --speedup 2\n\n"
    "ghostify compress out/teacher -o out/c3 --task sst2 --speedup 3 --runtime onnx-int8 --batch-size 32 --threads 2\n\n"
    "ghostify compress bert-base-uncased -o out/c2 --task mrpc --speedup 2 --budget standard --runtime pytorch\n\n"
    "ghostify compress out/teacher -o out/c6 --task sst2 --speedup 6 --budget 20m\n\n"
    "ghostify compress out/teacher -o out/c2 --task sst2 --speedup 2 --runtime openvino-int8\n\n"
    "ghostify compress ../shared/models/all-MiniLM-L6-v2 -o out/e2 --task embeddings --dataset ../shared/data/glue/stsb --text-columns sentence1,sentence2 --speedup 2 --budget 20m"
)
@settings_options(after={"speedup": "output"})
def compress(
    model: Model,
    output: Annotated[str, typer.Option("--output", "-o", help="Directory of the run: stages/, report.md, report.json, speedup.png (re-running it skips what is done).", show_default=False)],
    *,
    speedup: Annotated[float, typer.Option("--speedup", help="How many times faster than MODEL the result must run, measured in the target runtime.", show_default=False)],
    runtime: Annotated[str, typer.Option("--runtime", help=f"The runtime it ships in: {', '.join(RUNTIMES)} (auto: the installed one that runs the dense MODEL fastest in this shape, timed here once and said).")] = CompressDefaults.runtime,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per forward pass in the deployment.")] = Deployment.batch_size,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence in the deployment.")] = Deployment.seq_len,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads of the deployment.")] = Deployment.threads,
    data: DataSettings,
    task_settings: TaskSettings,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="A fine-tuned teacher (default: MODEL when it has a head for the task; else one is fine-tuned from MODEL first).", show_default=False)] = None,
    ghosts: Annotated[bool, typer.Option("--ghosts/--no-ghosts", help="Attach ghost modules after pruning (off: they did not pay in benchmarks/studies).")] = CompressDefaults.ghosts,
    prune_hidden: Annotated[Optional[bool], typer.Option("--prune-hidden/--no-prune-hidden", help="Let the allocation cut residual channels too (prune-hidden before prune). Default: on where the budget trains and the task's outputs keep their shape (not for sentence embeddings, whose width it is).", show_default=False)] = None,
    drop_layers: Annotated[Optional[bool], typer.Option("--drop-layers/--no-drop-layers", help="Let the allocation remove whole layers too, where a layer's score per ms saved is below its heads' and neurons' (drop-layers before prune). Default: on where the budget trains (not for shared layers).", show_default=False)] = CompressDefaults.drop_layers,
    budget: Annotated[str, typer.Option("--budget", help="A time for the whole run after the teacher exists (20m, 1h, 1h30m: every stage sized to the throughput measured on this machine; the counts it chose are written to OUT/budget.json), that budget.json (the same counts again, byte for byte), or " + ", ".join(f"{name} ({b.describe()})" for name, b in BUDGETS.items()) + "; --max-samples, --epochs and --importance-samples override a named one.")] = CompressDefaults.budget,
    stages: Annotated[Optional[int], typer.Option("--stages", help="Compression stages: prune part of the way, distil, score the distilled model again, prune further (the same factor each time). Default: 1 below 4x and for the named budgets; from 4x with a time budget, 2 where the budget is worth them (1 where the teacher's evaluation and scores predict that a second stage's scoring would take longer than its distillation gets).", show_default=False)] = None,
    unlabelled: Annotated[Optional[str], typer.Option("--unlabelled", help="More in-domain text for distillation, labels unread: a .txt file of one text per line, or a data file with the task's text columns.", show_default=False)] = None,
    masked_copies: Annotated[Optional[int], typer.Option("--masked-copies", help="Copies of every training text with 15% of its words replaced by the mask token, distilled besides it (labels unread). Default: the budget's (a time budget's for question answering: 1; else 0).", show_default=False)] = None,
    teacher_store_gb: Annotated[float, typer.Option("--teacher-store-gb", min=0.0, help="The most the store of the teacher's outputs (OUT/stages/teacher-outputs: computed once, read by every training stage) may hold, in GiB; 0: the teacher runs at every step.")] = TeacherStoreSettings.teacher_store_gb,
    mixed_precision: Annotated[str, typer.Option("--mixed-precision", help="auto (bf16 where the CPU or GPU has it in hardware, else no), no, bf16 or fp16: the training stages' precision.")] = CompressDefaults.mixed_precision,
    epochs: Annotated[Optional[int], typer.Option("--epochs", min=1, help="Epochs of every training stage (default: the budget's).", show_default=False)] = None,
    importance_samples: Annotated[Optional[int], typer.Option("--importance-samples", min=1, help="Examples that score heads and neurons (default: the budget's).", show_default=False)] = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed forward passes per model in each speed-up check.")] = CompressDefaults.rounds,
    seed: Seed = CompressDefaults.seed,
    json_output: Json = False,
) -> None:
    """Make MODEL N times faster on this machine, in the runtime it ships in, losing as little accuracy as
    the budget allows.

    Measures a latency model of this machine (cached), prunes heads, FFN neurons and (where the budget trains)
    whole layers and residual channels to the latency budget by importance, checks the speed-up measured before
    training (re-allocating when it misses by more than 5%), distils from the teacher, fine-tunes, exports and
    measures the shipped model against MODEL, in its runtime and in every installed one (the report names the
    fastest dense deployment and the speed-up over it). --max-samples (a data option) overrides the budget's sample count.
    """
    from ...recipe.compress import compress as run_compress

    report = run_compress(model, output, speedup=speedup,
                          deployment=Deployment(runtime=runtime, batch_size=batch_size, seq_len=seq_len, threads=threads),
                          data=data, task_settings=task_settings, teacher=teacher, ghosts=ghosts, budget=budget,
                          drop_layers=drop_layers, prune_hidden=prune_hidden, epochs=epochs, importance_samples=importance_samples,
                          stages=stages, unlabelled=unlabelled, masked_copies=masked_copies,
                          mixed_precision=mixed_precision,
                          teacher_store_gb=teacher_store_gb, rounds=rounds,
                          seed=seed, say=lambda line: err.print(line, markup=False))
    if json_output:
        print_json(report)
        return
    out.print(f"measured {report['measured_speedup']:.2f}x (target {report['target_speedup']:g}x); "
              f"{report['model_dir']}; report {output}/report.md", markup=False)
