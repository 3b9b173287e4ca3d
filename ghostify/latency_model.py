"""What one forward pass costs on this machine, as a function of what pruning keeps.

A :class:`LatencyModel` is fitted from timings of small probe models of one geometry (family,
hidden size, heads, FFN size, layers) in one deployment (runtime, batch, sequence length,
threads) on one machine: a constant for what pruning does not change (embeddings, pooler, the
task head), and per kept layer a constant plus a cost per kept head and per kept FFN neuron.
It is plain data (JSON), so that the pruning method can allocate against it without knowing how
it was measured (``ghostify latency`` measures it; ``prune --speedup`` and ``compress`` read it).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import GhostifyError
from .runtimes import AUTO, DEFAULT_DEPLOYMENT, deployment_names, target
from .settings import BenchDefaults

#: the ``--runtime`` choices of ``latency`` and ``compress``: every runtime's graphs (``ghostify.runtimes``), the default
#: first, then ``auto`` (the fastest installed one, timed; a latency model describes the one it picked)
RUNTIMES = (*deployment_names(), AUTO)
#: the JSON layout of a latency model; a newer one is refused. Format 2 adds what each cost saves per residual
#: channel removed (``per_channel``); a format-1 file predicts the full hidden size only
LATENCY_FORMAT = 2
#: the file a latency model is saved as, in the directory ``ghostify latency -o`` writes
LATENCY_FILE = "latency.json"


@dataclass(frozen=True)
class Deployment:
    """The deployment being targeted: which runtime runs the model, on how many sequences of how many
    tokens at once, with how many threads."""

    runtime: str = DEFAULT_DEPLOYMENT
    # the same defaults as ``ghostify bench``, which measures the same thing
    batch_size: int = BenchDefaults.batch_size
    seq_len: int = BenchDefaults.seq_len
    threads: int = BenchDefaults.threads

    def check(self, *, auto: bool = False) -> None:
        """Refuse a bad value in one line; ``auto``: the runtime may be ``auto`` (a command that picks it by timing)."""
        if auto and self.runtime not in RUNTIMES:  # one line for a name no runtime serves, auto among the choices
            raise GhostifyError(f"unknown --runtime {self.runtime!r}; choose one of {', '.join(RUNTIMES)}")
        if not (auto and self.runtime == AUTO):
            target(self.runtime)
        for name, value in (("--batch-size", self.batch_size), ("--seq-len", self.seq_len), ("--threads", self.threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GhostifyError(f"{name} {value!r} must be a whole number of at least 1")

    def describe(self) -> str:
        return f"{self.runtime}, batch {self.batch_size} x {self.seq_len} tokens, {self.threads} thread(s)"


@dataclass(frozen=True)
class Geometry:
    """The original (unpruned) shape a latency model describes; a model of another shape is refused."""

    family: str
    hidden_size: int
    num_heads: int
    ffn_size: int
    num_layers: int

    def describe(self) -> str:
        return (f"{self.family}, {self.num_layers} layers, hidden {self.hidden_size}, {self.num_heads} heads, "
                f"FFN {self.ffn_size}")


def _row_problem(row: Any, *, named: bool) -> str | None:
    """What is wrong with one timed row of a latency model (a probe, or a whole model the fit did not see:
    ``named``), or None: everything that prints or compares it (``ghostify latency``'s table,
    :meth:`LatencyModel.max_error`) reads these fields, so a file is refused whole rather than failing there."""
    if not isinstance(row, dict):
        return f"{row!r} is not a mapping"
    for key in ("measured_ms", "predicted_ms"):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{key} = {value!r}, not a finite number"
    if row["measured_ms"] <= 0:
        return f"measured_ms = {row['measured_ms']!r}: a forward pass takes some time"
    widths = [row.get("heads"), row.get("neurons")]
    if not all(isinstance(w, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in w)
               for w in widths) or len(widths[0]) != len(widths[1]) or not widths[0]:
        return f"heads = {widths[0]!r} and neurons = {widths[1]!r} are not one count per layer each"
    if named and not isinstance(row.get("name"), str):
        return f"name = {row.get('name')!r}, not a string"
    hidden = row.get("hidden")
    if hidden is not None and (isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1):
        return f"hidden = {hidden!r}, neither null nor a channel count"
    return None


@dataclass(frozen=True)
class ChannelCosts:
    """What one residual channel fewer saves of each cost, in milliseconds: the constant, a layer's, a head's
    and a neuron's (a projection reading or writing the residual stream shrinks with it; the attention
    scores of a head do not)."""

    base: float
    layer: float
    head: float
    neuron: float

    def values(self) -> tuple[float, float, float, float]:
        return (self.base, self.layer, self.head, self.neuron)


@dataclass(frozen=True)
class LatencyModel:
    """Milliseconds per forward pass: ``base_ms`` + over the kept layers
    (``layer_ms`` + ``head_ms`` x heads + ``neuron_ms`` x neurons), at the full hidden size; with
    ``per_channel``, each cost at ``w`` residual channels is the full one less ``per_channel`` x (hidden - w)."""

    geometry: Geometry
    deployment: Deployment
    machine: str
    base_ms: float
    layer_ms: float
    head_ms: float
    neuron_ms: float
    #: how well the fit predicts whole models it was not fitted on: rows of name, measured_ms, predicted_ms
    validation: list[dict[str, Any]] = field(default_factory=list)
    #: the probes it was fitted on: rows of layers, heads, neurons, measured_ms (and hidden: the channels kept)
    probes: list[dict[str, Any]] = field(default_factory=list)
    format: int = LATENCY_FORMAT
    #: what a residual channel fewer saves of each cost (None: measured at the full hidden size only)
    per_channel: ChannelCosts | None = None

    @property
    def predicts_hidden(self) -> bool:
        """Whether it predicts a narrower hidden size (it was measured at several)."""
        return self.per_channel is not None

    def costs(self, hidden: int | None = None) -> tuple[float, float, float, float]:
        """``base_ms, layer_ms, head_ms, neuron_ms`` at ``hidden`` residual channels (None: the full hidden size)."""
        full = (self.base_ms, self.layer_ms, self.head_ms, self.neuron_ms)
        removed = 0 if hidden is None else self.geometry.hidden_size - hidden
        if removed == 0:
            return full
        if self.per_channel is None:
            raise GhostifyError(f"this latency model ({self.deployment.describe()}) was measured at the full hidden size "
                                f"({self.geometry.hidden_size}) only and cannot predict {hidden} channels; measure it "
                                "again with `ghostify latency MODEL --refresh`")
        return tuple(max(0.0, c - s * removed) for c, s in zip(full, self.per_channel.values()))  # type: ignore[return-value]

    def predict(self, heads: Sequence[int], neurons: Sequence[int], hidden: int | None = None) -> float:
        """Predicted milliseconds of a model keeping ``heads[i]`` heads and ``neurons[i]`` FFN neurons in
        its i-th kept layer (a dropped layer is simply not listed) and ``hidden`` residual channels (None: all)."""
        if len(heads) != len(neurons):
            raise ValueError(f"{len(heads)} head counts for {len(neurons)} layers")
        base, layer, head, neuron = self.costs(hidden)
        return base + sum(layer + head * h + neuron * n for h, n in zip(heads, neurons))

    def layer_run_ms(self, heads: int, neurons: int, hidden: int | None = None) -> float:
        """What one run of a layer keeping ``heads`` heads and ``neurons`` FFN neurons costs."""
        _, layer, head, neuron = self.costs(hidden)
        return layer + head * heads + neuron * neurons

    def fastest_ms(self, heads: Sequence[int], neurons: Sequence[int], applications: Sequence[int] | None = None,
                   droppable: Sequence[int] = (), hidden: int | None = None) -> float:
        """The predicted milliseconds after every removal pruning may make from a model of ``heads[l]``
        heads and ``neurons[l]`` neurons in layer ``l`` (run ``applications[l]`` times): down to 1 head
        and 1 neuron per layer, where a unit saves anything, and the ``droppable`` layers whose removal
        then saves anything, but one layer; at ``hidden`` residual channels (None: all of them)."""
        applications = list(applications) if applications is not None else [1] * len(heads)
        _, _, head_ms, neuron_ms = self.costs(hidden)
        fewest_heads = [1 if head_ms > 0 else h for h in heads]
        fewest_neurons = [1 if neuron_ms > 0 else n for n in neurons]
        gone = {l for l in droppable if self.layer_run_ms(fewest_heads[l], fewest_neurons[l], hidden) > 0}
        if len(gone) == len(heads):  # one layer stays (they cost the same: each runs once)
            gone.discard(max(gone))
        runs = [l for l in range(len(heads)) if l not in gone for _ in range(applications[l])]
        return self.predict([fewest_heads[l] for l in runs], [fewest_neurons[l] for l in runs], hidden)

    def dense_ms(self) -> float:
        """Predicted milliseconds of the unpruned model of this geometry."""
        g = self.geometry
        return self.predict([g.num_heads] * g.num_layers, [g.ffn_size] * g.num_layers)

    def max_error(self) -> float | None:
        """The largest relative error on the validation models (None before any)."""
        errors = [abs(row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"] for row in self.validation]
        return max(errors) if errors else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "latency model") -> LatencyModel:
        if not isinstance(data, dict):
            raise GhostifyError(f"{where} is not a JSON object; write it again with `ghostify latency`")
        version = data.get("format")
        if not isinstance(version, int) or version > LATENCY_FORMAT:
            raise GhostifyError(f"{where} has format {version!r}, which this ghostify (format {LATENCY_FORMAT}) "
                                "cannot read; upgrade ghostify or measure it again with `ghostify latency`")
        try:
            model = cls(geometry=Geometry(**data["geometry"]), deployment=Deployment(**data["deployment"]),
                        machine=str(data["machine"]), base_ms=float(data["base_ms"]), layer_ms=float(data["layer_ms"]),
                        head_ms=float(data["head_ms"]), neuron_ms=float(data["neuron_ms"]),
                        validation=list(data.get("validation", [])), probes=list(data.get("probes", [])), format=version,
                        per_channel=None if data.get("per_channel") is None else ChannelCosts(**data["per_channel"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise GhostifyError(f"{where} is incomplete or malformed ({type(exc).__name__}: {exc}); "
                                "measure it again with `ghostify latency`") from None
        costs = (model.base_ms, model.layer_ms, model.head_ms, model.neuron_ms)
        slopes = model.per_channel.values() if model.per_channel is not None else ()
        if not all(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0 for c in slopes):
            raise GhostifyError(f"{where} has per-channel costs {slopes}: each must be a finite number of milliseconds, "
                                "0 or more; measure it again with `ghostify latency`")
        if not all(math.isfinite(c) and c >= 0 for c in costs):
            raise GhostifyError(f"{where} has costs {costs}: each must be a finite number of milliseconds, 0 or more; "
                                "measure it again with `ghostify latency`")
        # each cost may be finite and their sum not (1e308 each): every prediction is at most the dense one,
        # so a finite dense prediction keeps every sum an allocation forms finite
        dense = model.dense_ms()
        if not math.isfinite(dense):
            raise GhostifyError(f"{where} has costs {costs} whose sum for the dense model is {dense} ms, not a finite "
                                "number; measure it again with `ghostify latency`")
        if dense <= 0:
            raise GhostifyError(f"{where} has costs {costs} that predict no positive latency; "
                                "measure it again with `ghostify latency`")
        for kind, rows in (("probes", model.probes), ("validation", model.validation)):
            for i, row in enumerate(rows):
                problem = _row_problem(row, named=kind == "validation")
                if problem is not None:
                    raise GhostifyError(f"{where} has a malformed {kind}[{i}]: {problem}; "
                                        "measure it again with `ghostify latency`")
        model.deployment.check()
        return model

    def save(self, path: str | os.PathLike) -> None:
        """Write as JSON (the caller makes the write atomic: it is one small file in an output directory)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> LatencyModel:
        """Read a latency model file, or the ``latency.json`` in a directory, with one-line errors."""
        path = Path(path)
        if path.is_dir():
            path = path / LATENCY_FILE
        if not path.is_file():
            raise GhostifyError(f"latency model {path} does not exist; write one with `ghostify latency MODEL -o DIR`")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise GhostifyError(f"latency model {path} is not readable JSON ({exc}); "
                                "write it again with `ghostify latency`") from None
        return cls.from_dict(data, where=f"latency model {path}")
