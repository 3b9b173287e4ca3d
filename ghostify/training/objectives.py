"""What the loop optimises: task fine-tuning (optionally with a teacher's logits) and GhostBERT's
layer-wise distillation. The teacher is held outside the module tree, so it is never trained nor
wrapped for data-parallel training, and runs in eval mode without gradients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from transformers.utils import ModelOutput

from ..architectures import get_adapter
from ..checkpoint import model_record
from ..data.sop import IGNORE
from ..data.sop import PREFIX as SOP_PREFIX
from ..methods import channel_origin
from ..settings import DistillWeights
from .capture import capture, enable_score_capture
from .layer_map import LayerMap
from .loop import Objective
from .sharding import split_state
from .losses import attention_score_mse, masked_mse
from .teacher_store import KEY, Field


class TaskLosses(Protocol):
    """What an objective reads from a task kind: every ``ghostify.tasks.TaskKind`` is one (the task
    kinds sit a layer above training and import it, so training names only this shape)."""

    def inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def task_loss(self, output: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def teacher_loss(self, student: Any, teacher: Any, batch: dict[str, torch.Tensor],
                     temperature: float) -> torch.Tensor: ...

    #: the fields of the model's output that ``teacher_loss`` reads, each with whether it is per token
    teacher_outputs: dict[str, bool]


@dataclass
class TeacherOutput(ModelOutput):
    """The fields of a teacher's output that a task's ``teacher_loss`` reads, rebuilt from the teacher store."""

    logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None


def _output_fields(kind: TaskLosses) -> list[Field]:
    return [Field(f"output.{name}", per_token, head=True) for name, per_token in kind.teacher_outputs.items()]


def _teacher_output(kind: TaskLosses, values: dict[str, torch.Tensor]) -> TeacherOutput:
    return TeacherOutput(**{name: values[f"output.{name}"] for name in kind.teacher_outputs})


def _rows(inputs: dict[str, torch.Tensor], rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The inputs of some rows of a batch (None: all of them)."""
    return inputs if rows is None else {k: v.index_select(0, rows) for k, v in inputs.items()}


class FinetuneObjective(Objective):
    """The task's loss (cross-entropy, MSE for regression, per token, or over answer starts and
    ends: ``kind.task_loss``); with a teacher, ``(1 - w)·task + w·teacher loss`` (``kind.teacher_loss``)."""

    def __init__(self, student: nn.Module, kind: TaskLosses, *, teacher: nn.Module | None = None,
                 teacher_weight: float = 1.0, temperature: float = 1.0):
        super().__init__()
        self.student = student
        self.kind = kind
        self.teacher_weight = teacher_weight
        self.temperature = temperature
        object.__setattr__(self, "_teacher", teacher)  # not a submodule: never trained or wrapped

    def forward(self, batch: dict):
        batch = dict(batch)
        keys = batch.pop(KEY, None)
        inputs = self.kind.inputs(batch)
        out = self.student(**inputs)
        hard = self.kind.task_loss(out, batch)
        parts = {"task_loss": hard.detach()}
        if self._teacher is None:
            return hard, parts
        fields = _output_fields(self.kind)

        def compute(rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
            output = self.run_teacher(hard.device, **_rows(inputs, rows))
            return {f.name: getattr(output, f.name.split(".", 1)[1]) for f in fields}

        if self.store is not None and keys is not None:
            values = self.store.fetch(keys, inputs["attention_mask"], fields, compute)
        else:
            values = compute(None)
        soft = self.kind.teacher_loss(out, _teacher_output(self.kind, values), batch, self.temperature)
        parts["teacher_loss"] = soft.detach()
        w = self.teacher_weight
        return (1 - w) * hard + w * soft, parts


def _hidden_size(model: nn.Module) -> int:
    return get_adapter(model.config).hidden_size(model.config)


def _teacher_channels(student: nn.Module, teacher_width: int) -> torch.Tensor | None:
    """The teacher channels a student whose hidden size was cut (``prune-hidden``) kept, when the teacher has the
    width the student was cut from (it is the unpruned source, say): each student hidden state is then compared
    with the teacher's same channels, with no learned map. None otherwise."""
    origin = channel_origin(model_record(student))
    if origin is None or origin[1] != teacher_width or len(origin[0]) != _hidden_size(student):
        return None
    return torch.tensor(origin[0], dtype=torch.long)


def _head_selection(student: nn.Module, teacher: nn.Module, layer_map: LayerMap) -> list[torch.Tensor | None]:
    """For each mapped pair, which teacher heads the student's heads correspond to.

    A pruned student keeps its heads' original indices in its record; when the teacher still has
    those heads (it is the unpruned source, say), head j is compared with its original. Otherwise
    equal head counts compare one-to-one, and different counts compare head-averaged scores (None).
    """
    s_adapter, t_adapter = get_adapter(student.config), get_adapter(teacher.config)
    s_heads = _per_application(model_record(student).heads, s_adapter.layer_order(student))
    t_heads = _per_application(model_record(teacher).heads, t_adapter.layer_order(teacher))
    selection: list[torch.Tensor | None] = []
    for s, t in layer_map.pairs:
        mine, theirs = s_heads[s - 1], t_heads[t - 1]
        if all(h in theirs for h in mine):
            selection.append(torch.tensor([theirs.index(h) for h in mine]))
        elif len(mine) == len(theirs):
            selection.append(torch.arange(len(mine)))
        else:
            selection.append(None)
    return selection


def _per_application(per_layer: list, order: list[int]) -> list:
    """Per-distinct-layer items, one per layer application in the order the layers run."""
    return [per_layer[i] for i in order]


class DistillObjective(Objective):
    """GhostBERT's ``ℓ_emb + ℓ_mha + ℓ_ffn`` (MSE on the embedding output and on the hidden states
    after every attention and FFN block), plus TinyBERT's attention-score MSE and prediction-layer
    soft cross-entropy, and ALBERT's sentence-order prediction, each weighted. Learned linear maps
    bridge different hidden sizes, except for a student whose hidden size was cut from the teacher's: its
    hidden states are compared with the teacher's kept channels. The SOP classifier reads the student's
    first-token output."""

    def __init__(self, student: nn.Module, teacher: nn.Module, *, weights: DistillWeights, layer_map: LayerMap,
                 kind: TaskLosses, keep_outputs: bool = False):
        super().__init__()
        weights.validate()
        self.student = student
        self.weights = weights
        # without the logit loss, the hidden-state and attention losses never reach the task head
        self.may_leave_weights_unused = not weights.logit_weight
        self.layer_map = layer_map
        self.kind = kind
        object.__setattr__(self, "_teacher", teacher)
        ds, dt = _hidden_size(student), _hidden_size(teacher)
        self.projections = nn.ModuleDict()
        #: a plain tensor, not a buffer: the objective's saved state holds only what it learns
        self.channels = _teacher_channels(student, dt)
        if ds != dt and self.channels is None:  # TinyBERT: one map for the embeddings, one shared by all hidden states
            self.projections["embeddings"] = nn.Linear(ds, dt)
            self.projections["hidden"] = nn.Linear(ds, dt)
        if weights.sop_weight > 0:  # saved with the projections, not part of the student
            self.projections["sop"] = nn.Linear(ds, 2)
        self.heads = _head_selection(student, teacher, layer_map) if weights.attention_weight > 0 else []
        if weights.attention_weight > 0:  # ghosted layers' scores include their ghost maps
            enable_score_capture(student)
            enable_score_capture(teacher)
        teacher.eval().requires_grad_(False)
        #: the teacher's output fields are read too where a store shares them with a fine-tune (``keep_outputs``)
        self.keep_outputs = keep_outputs
        self.fields = self._teacher_fields()

    @property
    def storable(self) -> bool:
        """Whether the teacher store can hold what this objective reads (attention scores are not kept: they
        are heads x tokens x tokens per layer)."""
        return self.weights.attention_weight == 0

    def _teacher_fields(self) -> list[Field]:
        """What the losses read from the teacher: the embedding output and the mapped layers' hidden states, the
        mapped attention blocks' outputs, and the output fields the prediction-layer loss reads."""
        w = self.weights
        hidden = ([0] if w.emb_weight else []) + ([t for _, t in self.layer_map.pairs] if w.ffn_weight else [])
        fields = [Field(f"hidden.{t}", True) for t in sorted(set(hidden))]
        if w.mha_weight:
            fields += [Field(f"block.{t}", True) for t in sorted({t for _, t in self.layer_map.pairs})]
        if w.logit_weight or self.keep_outputs:
            fields += _output_fields(self.kind)
        return fields

    def _run_teacher(self, inputs: dict[str, torch.Tensor], rows: torch.Tensor | None,
                     scores: bool = False) -> tuple[dict[str, torch.Tensor], Any]:
        """The teacher on ``rows`` of the batch (None: all): the values of :attr:`fields`, and what was captured."""
        device = inputs["attention_mask"].device
        with capture(self._teacher, attention_blocks=self.weights.mha_weight > 0, scores=scores) as captured:
            out = self.run_teacher(device, **_rows(inputs, rows), output_hidden_states=True)
        values = {}
        for f in self.fields:
            kind, what = f.name.split(".", 1)
            if kind == "hidden":
                values[f.name] = out.hidden_states[int(what)]
            elif kind == "block":
                values[f.name] = captured.attention_blocks[int(what) - 1]
            else:
                values[f.name] = getattr(out, what)
        return values, captured

    def _project(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.projections[name](x) if name in self.projections else x

    def _kept(self, x: torch.Tensor) -> torch.Tensor:
        """A teacher hidden state as the student's is laid out: its kept channels, for a hidden-pruned student."""
        return x if self.channels is None else x.index_select(-1, self.channels.to(x.device))

    def _kept_output(self, student_out: Any, teacher_out: Any) -> Any:
        """The teacher's output with its last hidden state cut to the kept channels where the student's is (a
        hidden-pruned encoder without --keep-output-dim: the embeddings task pools both), else as it is."""
        s, t = getattr(student_out, "last_hidden_state", None), getattr(teacher_out, "last_hidden_state", None)
        if self.channels is None or s is None or t is None or s.shape[-1] == t.shape[-1]:
            return teacher_out
        return type(teacher_out)(**{**teacher_out, "last_hidden_state": self._kept(t)})

    def _sop_loss(self, sop: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy of in-order vs swapped segments, over the examples that have two."""
        labels = sop.pop("labels")
        keep = labels != IGNORE
        if not bool(keep.any()):  # zero, but through the classifier so data-parallel ranks agree
            return self.projections["sop"].weight.sum() * 0.0
        inputs = {k: v[keep] for k, v in sop.items()}
        first = self.student(**inputs, output_hidden_states=True).hidden_states[-1][:, 0]
        return nn.functional.cross_entropy(self.projections["sop"](first).float(), labels[keep])

    def forward(self, batch: dict):
        batch = dict(batch)
        keys = batch.pop(KEY, None)
        inputs = self.kind.inputs(batch)
        sop = {k[len(SOP_PREFIX):]: inputs.pop(k) for k in list(inputs) if k.startswith(SOP_PREFIX)}
        mask = inputs["attention_mask"].bool()
        w = self.weights
        scores = w.attention_weight > 0
        if self.store is not None and keys is not None and self.storable:
            teacher = self.store.fetch(keys, inputs["attention_mask"], self.fields,
                                       lambda rows: self._run_teacher(inputs, rows)[0])
            t_cap = None
        else:
            teacher, t_cap = self._run_teacher(inputs, None, scores=scores)
        with capture(self.student, scores=scores) as s_cap:
            s_out = self.student(**inputs, output_hidden_states=True)

        zero = s_out.hidden_states[0].new_zeros(())
        parts = {"emb_loss": zero, "mha_loss": zero, "ffn_loss": zero, "attention_loss": zero, "logit_loss": zero}
        if w.sop_weight:
            parts["sop_loss"] = self._sop_loss(sop)
        if w.emb_weight:
            parts["emb_loss"] = masked_mse(self._project("embeddings", s_out.hidden_states[0]),
                                           self._kept(teacher["hidden.0"]), mask)
        for k, (s, t) in enumerate(self.layer_map.pairs):
            if w.ffn_weight:
                parts["ffn_loss"] = parts["ffn_loss"] + masked_mse(
                    self._project("hidden", s_out.hidden_states[s]), self._kept(teacher[f"hidden.{t}"]), mask)
            if w.mha_weight:
                parts["mha_loss"] = parts["mha_loss"] + masked_mse(
                    self._project("hidden", s_cap.attention_blocks[s - 1]), self._kept(teacher[f"block.{t}"]), mask)
            if scores:
                s_scores, t_scores = s_cap.scores[s - 1], t_cap.scores[t - 1]
                heads = self.heads[k]
                if heads is None:
                    s_scores, t_scores = s_scores.mean(1, keepdim=True), t_scores.mean(1, keepdim=True)
                else:
                    t_scores = t_scores.index_select(1, heads.to(t_scores.device))
                parts["attention_loss"] = parts["attention_loss"] + attention_score_mse(s_scores, t_scores, mask)
        if w.logit_weight:
            t_out = _teacher_output(self.kind, teacher)
            parts["logit_loss"] = self.kind.teacher_loss(s_out, self._kept_output(s_out, t_out), inputs, w.temperature)
        loss = (w.emb_weight * parts["emb_loss"] + w.mha_weight * parts["mha_loss"] + w.ffn_weight * parts["ffn_loss"]
                + w.attention_weight * parts["attention_loss"] + w.logit_weight * parts["logit_loss"])
        if w.sop_weight:
            loss = loss + w.sop_weight * parts["sop_loss"]
        return loss, {k: v.detach() for k, v in parts.items()}

    def extra_state_to_save(self, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        tensors = self.projections.state_dict() if state is None else split_state(state, "projections")
        return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
