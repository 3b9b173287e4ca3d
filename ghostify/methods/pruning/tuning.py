"""Mask tuning (Kwon et al. 2022, "A Fast Post-Training Pruning Framework for Transformers", §4.3):
after pruning, each layer's kept heads and neurons get a scale that makes the pruned layer, fed the
pruned model's own hidden states, reproduce what the unpruned layer computed on the unpruned model's.

The output of a layer's attention is linear in per-head scales: with ``cₜᵤ`` the context of unit
``u`` (a head, or a key/value group's heads) at token ``t`` and ``W_O[:, u]`` its columns of the output
projection, the residual sum is ``rₜ + b_O + Σᵤ mᵤ W_O[:, u] cₜᵤ``; the FFN's likewise in per-neuron
scales, ``rₜ + b₂ + Σⱼ mⱼ W₂[:, j] aₜⱼ``. So each is one linear least-squares problem over the tokens of
a few hundred unlabelled examples, ``min_m Σₜ ‖Σᵤ mᵤ Aₜᵤ − Bₜ‖² + λ‖m − 1‖²``, with ``Bₜ`` the unpruned
model's residual sum at that token less the pruned model's residual input and bias. It is solved in
closed form from its normal equations (a few thousand unknowns at most), damped towards the
untuned scales 1, and the scales are folded into the output projections' columns: the result is an
ordinary pruned checkpoint.

Layers are tuned in order, attention before FFN, each on the pruned model's hidden states after the
layers before it were tuned. The hidden states of every example are cached per layer, and each layer
is run alone on them with the arguments the encoder passed it (captured once), so the whole tuning
costs about one forward pass of the unpruned model and a few of the pruned one. Where a family's
encoder does something between layers (DeBERTa-v2's convolution after the first), checked on the
first batch, a layer's inputs are instead captured from whole forward passes.

A part of the examples is held out: a scale vector that does not lower the held-out reconstruction
error (or is not finite, or beyond ±10 as Kwon et al. bound it) is not applied, and the layer keeps
its untuned scales. Layer by layer, the least squares do not see the task's head: where the whole tuned
model is further from the teacher on the held-out examples by the task's own measure (its distillation
loss), every scale is undone. (Measured on MiniLM: tuning took a 1.5x CoNLL-2003 tagger from 77.4 to
83.6 F1, but took a uniformly pruned one from 85.4 to 83.3; the held-out distance said which.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import GhostifyError

#: the damping λ of the least squares, relative to the mean diagonal of their normal matrix: enough to keep a
#: nearly singular system (units that never fire on the examples) near the untuned scales, too little to matter
#: otherwise
DAMPING = 1e-3
#: the largest scale magnitude applied (Kwon et al.'s bound: beyond it the solution is treated as failed)
MAX_SCALE = 10.0


class _Stop(Exception):
    """Raised by a hook once what it waits for is captured: the rest of the forward pass is not needed."""


@dataclass
class LeastSquares:
    """The normal equations of ``min_m ‖A m − B‖²`` summed over tokens, with ``‖B‖²`` for the residual."""

    units: int
    gram: torch.Tensor = field(init=False)
    rhs: torch.Tensor = field(init=False)
    target: float = 0.0
    tokens: int = 0

    def __post_init__(self) -> None:
        self.gram = torch.zeros(self.units, self.units, dtype=torch.float64)
        self.rhs = torch.zeros(self.units, dtype=torch.float64)

    def error(self, scales: torch.Tensor) -> float:
        """``‖A m − B‖²`` per token at ``scales``."""
        at = scales.double()
        return float(at @ self.gram @ at - 2 * at @ self.rhs + self.target) / max(1, self.tokens)

    def solve(self, damping: float = DAMPING) -> torch.Tensor:
        """The damped solution, pulled towards 1: ``(AᵀA + λI) m = AᵀB + λ·1``."""
        pull = damping * float(self.gram.diagonal().mean().clamp_min(1e-30))  # λ
        eye = torch.eye(self.units, dtype=torch.float64)
        return torch.linalg.solve(self.gram + pull * eye, self.rhs + pull)


@dataclass
class SublayerReport:
    """What tuning did to one layer's attention or FFN: the reconstruction error per token (fit and held-out
    examples) with the untuned scales and with the tuned ones, and whether they were applied."""

    layer: int
    part: str  # "attention" or "ffn"
    units: int
    fit_before: float
    fit_after: float
    held_out_before: float
    held_out_after: float
    applied: bool
    why: str = ""

    def row(self) -> dict[str, Any]:
        return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def check_tunable(family: str, shares_layers: bool) -> None:
    """Refuse tuning a model whose layers run more than once (ALBERT, ``share-layers``): one scale vector would
    have to serve inputs that its own tuning changes. ``prune`` asks from the config before any weight is read."""
    if shares_layers:
        raise GhostifyError(f"--tune-masks needs layers that run once each, but this {family} model runs "
                            "shared layers several times per forward pass; prune without --tune-masks")


@dataclass
class Tuning:
    """What :func:`tune_masks` did: each layer's attention and FFN (:class:`SublayerReport`), and the distance of
    the whole model's outputs to the teacher's on the held-out examples before and after (when a distance was
    given), by which the tuned scales were kept or undone."""

    sublayers: list[SublayerReport]
    distance_before: float | None = None
    distance_after: float | None = None
    kept: bool = True

    def row(self) -> dict[str, Any]:
        def number(v: float | None) -> float | None:
            return None if v is None else float(f"{v:.6g}")

        return {"kept": self.kept, "distance_before": number(self.distance_before),
                "distance_after": number(self.distance_after), "layers": [r.row() for r in self.sublayers]}


def tune_masks(student: nn.Module, teacher: nn.Module, batches: Sequence[dict[str, torch.Tensor]], *,
               held_out: int, damping: float = DAMPING,
               distance: Callable[[Any, Any, Mapping[str, Any]], float] | None = None) -> Tuning:
    """Scale ``student``'s kept heads and neurons (in place, folded into its output projections) so that each
    of its layers reproduces ``teacher``'s residual sums (``teacher``: the same model before pruning).

    ``batches``: model inputs with ``attention_mask`` (labels are not read); the last ``held_out`` of them only
    judge the solution: each layer's scales by its reconstruction error there, and with ``distance(output,
    teacher_output, batch)`` (the task's measure of how far a model's outputs are from the teacher's) all of
    them together: where the tuned model is further from the teacher on the held-out batches than the untuned
    one, every scale is undone (the layer-wise least squares do not see the task's head).
    """
    adapter = get_adapter(student.config)
    check_tunable(adapter.family, any(n > 1 for n in adapter.layer_applications(student)))
    if not 0 < held_out < len(batches):
        raise ValueError(f"held_out={held_out} of {len(batches)} batches")
    student.eval()
    teacher.eval()
    teacher_layers, student_layers = adapter.layers(teacher), adapter.layers(student)
    device = next(student.parameters()).device
    batches = [{k: v.to(device) for k, v in batch.items() if k != "labels"} for batch in batches]
    fit = [index < len(batches) - held_out for index in range(len(batches))]  # False: held out
    masks = [batch["attention_mask"].bool() for batch in batches]
    reports: list[SublayerReport] = []
    tuned = _tuned_weights(adapter, student_layers)
    untuned = [w.detach().clone() for w in tuned]
    judged = batches[len(batches) - held_out:]
    before = _distance(student, teacher, judged, distance) if distance is not None else None
    with torch.no_grad():
        calls, first_inputs = _layer_calls(teacher, teacher_layers, batches)
        chained = _outputs_chain(teacher_layers, calls[0], first_inputs)
        # each batch's hidden states entering the layer being tuned, in the teacher and in the student
        teacher_inputs = [batch_calls[0].hidden for batch_calls in calls]
        student_inputs = list(teacher_inputs)
        for batch_calls in calls:
            batch_calls[0].hidden = None  # held by the lists above alone, so replacing them frees them
        del first_inputs
        for layer, (teacher_layer, student_layer) in enumerate(zip(teacher_layers, student_layers)):
            if layer > 0 and not chained:
                teacher_inputs = [_input_of(teacher, teacher_layer, batch) for batch in batches]
                student_inputs = [_input_of(student, student_layer, batch) for batch in batches]
            targets = [_teacher_sums(adapter, teacher_layer, calls[batch][layer], teacher_inputs[batch], masks[batch])
                       for batch in range(len(batches))]
            reports.append(_tune_attention(adapter, student.config, student_layer, layer, calls, student_inputs,
                                           targets, masks, fit, damping))
            reports.append(_tune_ffn(adapter, student_layer, layer, calls, student_inputs, targets, masks, fit, damping))
            if chained:
                teacher_inputs = [sums.output for sums in targets]
                del targets  # the sums of this layer, before the next layer's are made
                for batch in range(len(batches)):  # in place: one batch's states at a time, not a second list of them
                    student_inputs[batch] = calls[batch][layer].run(student_layer, student_inputs[batch])
    result = Tuning(sublayers=reports, distance_before=before)
    if distance is not None:
        result.distance_after = _distance(student, teacher, judged, distance)
        if result.distance_after > before:  # a tie (outputs equal to float precision) keeps the layer-wise checks' word
            with torch.no_grad():
                for weight, original in zip(tuned, untuned):
                    weight.copy_(original)
            result.kept = False
    return result


def _tuned_weights(adapter: ArchitectureAdapter, layers: list[nn.Module]) -> list[torch.Tensor]:
    """The weights tuning scales: every layer's attention output and FFN down projections."""
    out = []
    for layer in layers:
        paths = adapter.paths_for_layer(layer)
        out += [adapter.submodule(layer, paths.attention_output).weight, adapter.submodule(layer, paths.ffn_down).weight]
    return out


def _distance(student: nn.Module, teacher: nn.Module, batches: Sequence[dict[str, torch.Tensor]],
              distance: Callable[[Any, Any, Mapping[str, Any]], float]) -> float:
    """The mean of ``distance`` over the examples of ``batches``."""
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            size = int(batch["input_ids"].shape[0])
            total += distance(student(**batch), teacher(**batch), batch) * size
            count += size
    return total / max(1, count)


# ----------------------------------------------------------------------------------------------
# running one layer alone on cached hidden states
# ----------------------------------------------------------------------------------------------
@dataclass
class LayerCall:
    """The arguments the encoder passed one layer for one batch; ``hidden``: its hidden states then."""

    args: tuple
    kwargs: dict[str, Any]
    #: the hidden states it received (kept for the first layer only: the others' come from the layer before)
    hidden: torch.Tensor | None

    def run(self, layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """``layer``'s output (its hidden states) on ``hidden`` with the other arguments as captured."""
        if self.args:
            out = layer(hidden, *self.args[1:], **self.kwargs)
        else:
            out = layer(**{**self.kwargs, "hidden_states": hidden})
        return out[0] if isinstance(out, tuple) else out


def _hidden_of(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _layer_calls(model: nn.Module, layers: list[nn.Module],
                 batches: list[dict[str, torch.Tensor]]) -> tuple[list[list[LayerCall]], list[torch.Tensor]]:
    """Every layer's call for every batch (from one forward pass each), and for the first batch the
    hidden states every layer received (to check that one layer's output is the next one's input).
    Only the first layer's hidden states are kept for the other batches."""
    calls: list[list[LayerCall]] = []
    first_inputs: list[torch.Tensor] = []
    for index, batch in enumerate(batches):
        row: list[LayerCall] = []

        def keep(module: nn.Module, args: tuple, kwargs: dict[str, Any], index: int = index, row: list = row) -> None:
            hidden = _hidden_of(args, kwargs)
            if index == 0:
                first_inputs.append(hidden)
            # the hidden states are dropped from the arguments kept (every layer's, for every example, would be most
            # of tuning's memory): run() passes the ones it is given in their place
            kept_args = (None, *args[1:]) if args else ()
            kept_kwargs = {k: v for k, v in kwargs.items() if k != "hidden_states"}
            row.append(LayerCall(args=kept_args, kwargs=kept_kwargs, hidden=None if row else hidden))

        with _hooks([layer.register_forward_pre_hook(keep, with_kwargs=True) for layer in layers]):
            model(**batch)
        calls.append(row)
    return calls, first_inputs


def _outputs_chain(layers: list[nn.Module], calls: list[LayerCall], inputs: list[torch.Tensor]) -> bool:
    """Whether each layer's output, run alone, is exactly what the next layer received (nothing runs between)."""
    for index in range(len(layers) - 1):
        if not torch.allclose(calls[index].run(layers[index], inputs[index]), inputs[index + 1], rtol=1e-5, atol=1e-6):
            return False
    return True


def _input_of(model: nn.Module, layer: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The hidden states ``layer`` receives in a whole forward pass of ``model`` (which stops there)."""
    seen: list[torch.Tensor] = []

    def stop(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        seen.append(_hidden_of(args, kwargs))
        raise _Stop

    with _hooks([layer.register_forward_pre_hook(stop, with_kwargs=True)]), contextlib.suppress(_Stop):
        model(**batch)
    return seen[0]


@contextlib.contextmanager
def _hooks(handles: list) -> Iterator[None]:
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _output(module_output: Any) -> torch.Tensor:
    return module_output[0] if isinstance(module_output, tuple) else module_output


def _attention_block_hook(adapter: ArchitectureAdapter, layer: nn.Module, keep) -> Any:
    """A hook calling ``keep(hidden)`` with the residual stream after the attention block (the FFN's residual
    input): the block's output, or for pre-norm layers its input (``LayerPaths.attention_block_is_input``)."""
    paths = adapter.paths_for_layer(layer)
    block = adapter.submodule(layer, paths.attention_block)
    if paths.attention_block_is_input:
        return block.register_forward_pre_hook(lambda module, args: keep(args[0]))
    return block.register_forward_hook(lambda module, args, output: keep(_output(output)))


@dataclass
class _Sums:
    """The unpruned layer's residual sums after attention and after the FFN at the real tokens (packed: only
    they are fitted), and its output (the next layer's input, padding included)."""

    attention: torch.Tensor
    ffn: torch.Tensor
    output: torch.Tensor


def _teacher_sums(adapter: ArchitectureAdapter, layer: nn.Module, call: LayerCall, hidden: torch.Tensor,
                  mask: torch.Tensor) -> _Sums:
    paths = adapter.paths_for_layer(layer)
    seen: dict[str, torch.Tensor] = {}
    handles = [
        adapter.submodule(layer, paths.attention_output).register_forward_hook(
            lambda module, args, out: seen.__setitem__("attention_output", _output(out))),
        adapter.submodule(layer, paths.ffn_down).register_forward_hook(
            lambda module, args, out: seen.__setitem__("ffn_output", _output(out))),
        _attention_block_hook(adapter, layer, lambda stream: seen.__setitem__("after_attention", stream)),
    ]
    with _hooks(handles):
        output = call.run(layer, hidden)
    return _Sums(attention=(hidden + seen["attention_output"])[mask],
                 ffn=(seen["after_attention"] + seen["ffn_output"])[mask], output=output)


# ----------------------------------------------------------------------------------------------
# the two least-squares problems of a layer
# ----------------------------------------------------------------------------------------------
def _tune_attention(adapter: ArchitectureAdapter, config: Any, layer: nn.Module, index: int,
                    calls: list[list[LayerCall]], inputs: list[torch.Tensor], targets: list[_Sums], masks: list[torch.Tensor], fit: list[bool],
                    damping: float) -> SublayerReport:
    paths = adapter.paths_for_layer(layer)
    out_proj = adapter.submodule(layer, paths.attention_output)
    width = adapter.unit_width(config)
    weight = out_proj.weight.detach().double()  # (hidden, units x width)
    units = weight.shape[1] // width
    per_unit = weight.view(weight.shape[0], units, width)  # W_O[:, u] for every unit
    bias = out_proj.bias.detach().double() if out_proj.bias is not None else 0.0
    problems = (LeastSquares(units), LeastSquares(units))  # fit, held out

    for batch, batch_calls in enumerate(calls):
        seen: dict[str, torch.Tensor] = {}

        def stop(module: nn.Module, args: tuple) -> None:
            seen["context"] = args[0]
            raise _Stop

        with _hooks([out_proj.register_forward_pre_hook(stop)]), contextlib.suppress(_Stop):
            batch_calls[index].run(layer, inputs[batch])
        mask = masks[batch]
        context = seen["context"][mask].double().view(-1, units, width)  # (tokens, units, width)
        contributions = torch.einsum("tuw,huw->uth", context, per_unit)  # (units, tokens, hidden)
        target = (targets[batch].attention.double() - inputs[batch][mask].double() - bias)
        _accumulate(problems[0 if fit[batch] else 1], contributions, target)
    scales, report = _solve(problems, index, "attention", damping)
    if report.applied:
        with torch.no_grad():
            columns = scales.to(out_proj.weight.dtype).repeat_interleave(width)
            out_proj.weight.mul_(columns.to(out_proj.weight.device))
    return report


def _tune_ffn(adapter: ArchitectureAdapter, layer: nn.Module, index: int, calls: list[list[LayerCall]],
              inputs: list[torch.Tensor], targets: list[_Sums], masks: list[torch.Tensor], fit: list[bool],
              damping: float) -> SublayerReport:
    paths = adapter.paths_for_layer(layer)
    down = adapter.submodule(layer, paths.ffn_down)
    weight = down.weight.detach().double()  # (hidden, neurons)
    neurons = weight.shape[1]
    bias = down.bias.detach().double() if down.bias is not None else 0.0
    products = weight.T @ weight  # W₂[:, i] · W₂[:, j]
    problems = (LeastSquares(neurons), LeastSquares(neurons))

    for batch, batch_calls in enumerate(calls):
        seen: dict[str, torch.Tensor] = {}

        def stop(module: nn.Module, args: tuple) -> None:
            seen["activations"] = args[0]
            raise _Stop

        handles = [down.register_forward_pre_hook(stop),
                   _attention_block_hook(adapter, layer, lambda stream: seen.__setitem__("residual", stream))]
        with _hooks(handles), contextlib.suppress(_Stop):
            batch_calls[index].run(layer, inputs[batch])
        mask = masks[batch]
        activations = seen["activations"][mask].float()  # (tokens, neurons)
        target = targets[batch].ffn.double() - seen["residual"][mask].double() - bias  # (tokens, hidden)
        problem = problems[0 if fit[batch] else 1]
        # the (neurons x neurons) product is most of the work: in float32 per batch (a few hundred tokens: its
        # rounding is far below the damping), summed in float64
        problem.gram += (activations.T @ activations).double() * products
        problem.rhs += (activations.double() * (target @ weight)).sum(0)
        problem.target += float(target.pow(2).sum())
        problem.tokens += activations.shape[0]
    scales, report = _solve(problems, index, "ffn", damping)
    if report.applied:
        with torch.no_grad():
            down.weight.mul_(scales.to(down.weight.dtype).to(down.weight.device))
    return report


def _accumulate(problem: LeastSquares, contributions: torch.Tensor, target: torch.Tensor) -> None:
    """Add one batch: ``contributions`` (units, tokens, hidden) are the columns of A, ``target`` (tokens, hidden) B."""
    problem.gram += torch.einsum("uth,vth->uv", contributions, contributions)
    problem.rhs += torch.einsum("uth,th->u", contributions, target)
    problem.target += float(target.pow(2).sum())
    problem.tokens += target.shape[0]


def _solve(problems: tuple[LeastSquares, LeastSquares], layer: int, part: str,
           damping: float) -> tuple[torch.Tensor, SublayerReport]:
    fit, held = problems
    ones = torch.ones(fit.units, dtype=torch.float64)
    scales = fit.solve(damping)
    report = SublayerReport(layer=layer, part=part, units=fit.units, fit_before=fit.error(ones),
                            fit_after=fit.error(scales), held_out_before=held.error(ones),
                            held_out_after=held.error(scales), applied=False)
    if not bool(torch.isfinite(scales).all()):
        report.why = "the least squares have no finite solution"
    elif float(scales.abs().max()) > MAX_SCALE:
        report.why = f"a scale of {float(scales.abs().max()):.3g} is beyond {MAX_SCALE:g}"
    elif report.held_out_after >= report.held_out_before:
        report.why = "the held-out error does not go down"
    else:
        report.applied = True
    if not report.applied:
        report.fit_after, report.held_out_after = report.fit_before, report.held_out_before
    return scales, report


__all__ = ["DAMPING", "LayerCall", "LeastSquares", "SublayerReport", "Tuning", "check_tunable", "tune_masks"]
