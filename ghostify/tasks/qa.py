"""Extractive question answering (SQuAD v1.1 and v2.0): an answer span in a context.

Contexts longer than ``--max-length`` are split into windows that overlap by ``--doc-stride``
tokens; training targets are the answer's first and last token in each window (the first token,
[CLS], where the window does not hold the whole answer or there is none). Predictions take the best
start/end pair over an example's windows (n-best 20, at most ``--max-answer-length`` tokens) and,
for v2, the null answer when its score beats the best span by more than ``--null-threshold``;
exact match and F1 are the official scripts' (``ghostify.data.qa``)."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.nn import functional as F

from ..data import TaskData
from ..data.qa import QAColumns, eval_features, postprocess, squad_metrics, train_features
from ..errors import DataError
from ..heads import has_head
from ..training.loop import Evaluation
from .base import TaskKind
from .classification import sample_labels

HEAD = "ForQuestionAnswering"
N_BEST = 20


class QuestionAnswering(TaskKind):
    name = "qa"
    head = "question-answering"
    noun = "question-answering"
    targets = ("start_positions", "end_positions")
    #: the start and end distributions alone (prediction-layer distillation), not the hidden states: a window's
    #: hidden states take about 1.7 MB in the teacher store (MiniLM at 256 tokens, float16), so its 4 GiB holds
    #: about half the SQuAD part's 4,832 windows and every later epoch runs the teacher on the rest again, where
    #: the logits of all of them take 3 MB and later epochs cost the student's steps alone (16.5 against 9
    #: windows/s). Fine-tuning the 3x student on the logits (and labels) for 2 epochs, about 825 s of a fresh run
    #: on a 2-core AMD EPYC, scored F1 43.5, where 1 epoch of the hidden states then 1 of the fine-tune (650 s)
    #: scored 38.4 (benchmarks/results/qa_learning.md)
    compress_distill = {"emb_weight": 0.0, "mha_weight": 0.0, "ffn_weight": 0.0, "logit_weight": 1.0}
    #: fine-tuning that student with the teacher for 2 epochs scored F1 34.5 and 36.7 (after the first and the
    #: second) at the budget's 1e-4, 39.5 and 43.5 at 3e-4, 41.3 and 44.2 at 5e-4 (benchmarks/results/qa_learning.md)
    #: one masked copy of every training text: the 3x student's F1 rose from 39.6 to 42.3 distilled for the same 600
    #: steps (benchmarks/results/budget_curve_xeon.md)
    compress_timed = {"distill_learning_rate": 5e-4, "finetune_learning_rate": 5e-4, "masked_copies": 1}

    @property
    def columns(self) -> QAColumns:
        p = self.preset
        return QAColumns(question=p.question_column, context=p.context_column, answers=p.answers_column)

    def with_data(self, data: TaskData):
        """A dataset without a preset is SQuAD v2 when some of its questions have no answer."""
        if self.preset.name == "custom" and data.has_labels and not self.preset.version_2:
            answers = data.rows[self.preset.answers_column]
            if any(not a["text"] for a in answers):
                self.preset = replace(self.preset, version_2=True)
        return self.preset

    def example_tokens(self) -> int | None:
        """A question's windows: its context cut at --max-length, most of them full."""
        return self.data.max_length

    def _window(self) -> tuple[int, int]:
        max_length, stride = self.data.max_length, self.task.doc_stride
        if stride >= max_length:
            raise DataError(f"--doc-stride {stride} must be less than --max-length {max_length} (windows overlap by "
                            "that many tokens); SQuAD is usually run with --max-length 384 --doc-stride 128")
        return max_length, stride

    def encode(self, data: TaskData, tokenizer):
        max_length, stride = self._window()
        columns = self.columns
        if not data.has_labels:  # label-free: windows without targets
            rows = data.rows.map(lambda b: {columns.answers: [{"text": [], "answer_start": []}] * len(b[columns.context])},
                                 batched=True)
        else:
            rows = data.rows
        encoded = rows.map(lambda b: train_features(b, tokenizer, columns=columns, max_length=max_length,
                                                    doc_stride=stride), batched=True, remove_columns=rows.column_names)
        return encoded if data.has_labels else encoded.remove_columns(list(self.targets))

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        max_length, stride = self._window()
        columns, task, version_2 = self.columns, self.task, self.preset.version_2
        features = data.rows.map(lambda b, ids: eval_features(b, tokenizer, columns=columns, max_length=max_length,
                                                              doc_stride=stride, ids=ids),
                                 batched=True, with_indices=True, remove_columns=data.rows.column_names)
        meta = [{"example": e, "offset_mapping": o} for e, o in zip(features["example"], features["offset_mapping"])]
        examples = [{columns.context: c} for c in data.rows[columns.context]]
        references = {i: list(a["text"]) for i, a in enumerate(data.rows[columns.answers])}
        inputs = features.remove_columns(["example", "offset_mapping"])

        def run(model, loader, accelerator):
            starts, ends = [], []
            was_training = model.training
            model.eval()
            with torch.no_grad():
                for batch in loader:
                    out = model(**self.inputs(batch))
                    start = accelerator.pad_across_processes(out.start_logits, dim=1, pad_index=-1e4)
                    end = accelerator.pad_across_processes(out.end_logits, dim=1, pad_index=-1e4)
                    start, end = accelerator.gather_for_metrics((start, end))
                    starts += [row for row in start.float().cpu()]
                    ends += [row for row in end.float().cpu()]
            model.train(was_training)
            predictions = postprocess(examples, meta, starts, ends, columns=columns, n_best=N_BEST,
                                      max_answer_length=task.max_answer_length, version_2=version_2,
                                      null_threshold=task.null_threshold)
            return {**squad_metrics(predictions, references), "samples": len(references)}

        return Evaluation(rows=inputs, collate=self.collator(tokenizer), run=run, select="f1",
                          full_score=100.0)  # squad_metrics: in percent, as the official script

    def augmentation_refusal(self) -> str | None:
        return "replacing words would move the answers' character offsets; augment sentence data"

    def head_labels(self, config) -> int | None:
        return 2 if has_head(config, HEAD) else None

    def num_labels(self) -> int | None:
        return None  # the head's two outputs (start, end) are fixed

    def head_options(self):
        return {}

    def per_example_loss(self, output, batch, *, label_free, generator):
        """The mean of the start and end cross-entropies; label-free: against positions drawn from
        the model's own start and end distributions (over the real tokens)."""
        mask = batch["attention_mask"] == 0
        start, end = (logits.float().masked_fill(mask, -1e4) for logits in (output.start_logits, output.end_logits))
        if label_free:
            start_pos, end_pos = sample_labels(start, generator), sample_labels(end, generator)
        else:
            start_pos, end_pos = batch["start_positions"], batch["end_positions"]
        return (F.cross_entropy(start, start_pos, reduction="none") + F.cross_entropy(end, end_pos, reduction="none")) / 2

    def task_loss(self, output, batch):
        return self.per_example_loss(output, batch, label_free=False, generator=None).mean()

    teacher_outputs = {"start_logits": True, "end_logits": True}

    def teacher_loss(self, student, teacher, batch, temperature):
        """Soft cross-entropy of the start and of the end distributions (padding excluded), averaged."""
        mask = batch["attention_mask"] == 0
        total = 0.0
        for s, t in ((student.start_logits, teacher.start_logits), (student.end_logits, teacher.end_logits)):
            targets = F.softmax(t.float().masked_fill(mask, -1e4) / temperature, dim=-1)
            total = total - (targets * F.log_softmax(s.float().masked_fill(mask, -1e4) / temperature, dim=-1)).sum(-1).mean()
        return total / 2
