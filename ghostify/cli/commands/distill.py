from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...methods import shipped
from ...settings import (DataSettings, DistillDefaults, DistillWeights, StudentSettings, TaskSettings,
                         TeacherStoreSettings, TrainSettings)
from ..app import app
from ..console import err
from ..options import Output, Overwrite, Resume
from ..settings_options import settings_options
from ..summary import print_trained, print_training

#: RefBERT's settings (``--references``, ``--reference-delta``), declared by the method (a shipped one: reading
#: it loads no plug-in, which the command line does only when it is read, never for --version)
REFERENCES = next(m for m in shipped() if m.name == "references").settings


@app.command(
    epilog="Examples:\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/distilled --task sst2\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/d --task sst2 --dataset out/sst2-aug "
    "--attention-weight 1 --logit-weight 1\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/d --task sst2 --train ghost-only\n\n"
    "accelerate launch --multi_gpu --num_processes 2 -m ghostify distill --teacher T --student S -o out/d --task sst2"
)
@settings_options
def distill(
    teacher: Annotated[str, typer.Option("--teacher", help="Teacher checkpoint (fine-tuned on the task).", show_default=False)],
    student: Annotated[str, typer.Option("--student", help="Student checkpoint (e.g. pruned, with ghost modules).", show_default=False)],
    output: Output,
    *,
    data: DataSettings,
    task_settings: TaskSettings,
    losses: DistillWeights,
    references: Annotated[bool, typer.Option("--references/--no-references", help="RefBERT: the student's first layer also attends to the teacher's pre-computed representations of the most similar other training example (store saved in the output; retrieved without the teacher at inference).")] = REFERENCES.references,
    reference_delta: Annotated[float, typer.Option("--reference-delta", help="RefBERT's δ subtracted from the first layer's attention weights at real key positions, in (0, 1).")] = REFERENCES.reference_delta,
    layer_map: Annotated[Optional[str], typer.Option("--layer-map", help="Explicit STUDENT:TEACHER layer pairs, e.g. 1:2,2:4,3:6 (default: one-to-one, or uniform for a shallower student).", show_default=False)] = None,
    unlabelled: Annotated[Optional[str], typer.Option("--unlabelled", help="More text to distill on, labels unread: a .txt file of one text per line (one-column tasks; words split at spaces for token classification), or a .csv/.tsv/.json/.jsonl/.parquet file with the task's text columns. --max-samples draws from it and the training split together.", show_default=False)] = None,
    masked_copies: Annotated[int, typer.Option("--masked-copies", help="Copies of every training text with 15% of its words replaced by the mask token, distilled besides it (the teacher's outputs on them, labels unread): more inputs where the training text is small (0: none).")] = DistillDefaults.masked_copies,
    student_settings: StudentSettings,
    training: TrainSettings,
    store: TeacherStoreSettings,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Distill a teacher into a student, layer by layer (GhostBERT).

    Loss: MSE between student and teacher on the embedding output and on the hidden states after
    every attention block and every FFN block (`emb + mha + ffn`, each weighted), optionally
    TinyBERT's attention-score MSE and prediction-layer soft cross-entropy at `--temperature`.
    Layers map one-to-one when depths match, uniformly when the student is shallower, or as
    `--layer-map` says; learned linear maps bridge different hidden sizes (saved apart, in
    `distill_projections.safetensors`). The teacher runs in eval mode without gradients. Labels are
    not needed, so augmented data (`ghostify augment`) works as `--dataset`. `--sop-weight` adds
    ALBERT's sentence-order prediction (a small classifier, saved with the projections) on
    sentence pairs or texts of two or more sentences. With `--logit-weight`
    the student is evaluated each epoch and the best kept; otherwise the last is written.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.distill(teacher, student, output, data=data, task_settings=task_settings, losses=losses, references=references,
                           reference_delta=reference_delta, layer_map=layer_map, unlabelled=unlabelled,
                           masked_copies=masked_copies, student_settings=student_settings, training=training,
                           store=store, resume=resume, overwrite=overwrite)
    print_training(result)
    if references:
        from ...checkpoint import load_config, read_record

        store = read_record(load_config(output)).entry("references")
        err.print(f"references: {store['entries']} entries, {store['bytes'] / 2**20:.1f} MiB store, retrieval agreement "
                  f"with the teacher's choice {store['retrieval']['agreement']:.3f}")
    print_trained(output)
