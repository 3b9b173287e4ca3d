"""``ghostify latency``: a measured latency model of this machine (:class:`ghostify.latency_model.LatencyModel`).

Probe models of the checkpoint's own architecture, random weights, one or two layers pruned
uniformly to a few head and neuron counts, are timed taking turns in the target runtime; a least
squares fit of ``base + layers x layer + heads x head + neurons x neuron`` milliseconds is then
checked against whole models of full depth it did not see. The result is cached per geometry,
deployment and machine in ghostify's cache directory, so that ``prune --speedup`` and ``compress``
measure once.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import statistics
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..architectures import get_adapter
from ..checkpoint import _auto_class, load_config, read_record, save_checkpoint
from ..errors import GhostifyError
from ..files import atomic_directory, check_output_dir
from ..flatten import checks_arguments
from ..latency_model import LATENCY_FILE, ChannelCosts, Deployment, Geometry, LatencyModel
from ..methods import channel_origin
from ..methods.hidden import cut_hidden, refusal
from ..methods.pruning import dense_record, model_geometry, prune_model
from ..record import RECORD_KEY, GhostifyRecord
from ..runtimes import AUTO, Target, target
from ..settings import BenchDefaults, LatencyDefaults
from .bench import check_memory, check_positions, guarded, module_runner, runner_for, take_turns
from .deployments import chosen_deployment
from .machine_cache import CACHE_ENV, cache_dir, lock_file, machine_key, measuring, store
from .timed_graphs import timed_graph


@dataclass(frozen=True)
class Shape:
    """One model to time: its name, the heads and FFN neurons each of its layers keeps, and the residual
    channels it keeps (None: all of them)."""

    name: str
    heads: tuple[int, ...]
    neurons: tuple[int, ...]
    hidden: int | None = None

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "layers": len(self.heads), "heads": list(self.heads), "neurons": list(self.neurons),
                "hidden": self.hidden}


def latency(
    model: str | os.PathLike,
    output: str | os.PathLike | None = None,
    *,
    runtime: str = Deployment.runtime,
    batch_size: int = Deployment.batch_size,
    seq_len: int = Deployment.seq_len,
    threads: int = Deployment.threads,
    rounds: int = BenchDefaults.rounds,
    warmup: int = BenchDefaults.warmup,
    refresh: bool = False,
    seed: int = LatencyDefaults.seed,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
) -> LatencyModel:
    """The latency model of ``model``'s original geometry (a pruned model describes the model it was
    pruned from) in the deployment ``runtime`` x ``batch_size`` x ``seq_len`` x ``threads`` on this
    machine (``runtime="auto"``: the installed one that runs ``model`` fastest in that shape,
    :func:`ghostify.steps.deployments.chosen_deployment`): from the cache when it was measured before
    (``refresh`` measures again), else measured on probe models (``rounds`` timed passes each after ``warmup`` untimed ones, the
    models taking turns; medians of CPU time on one thread, of wall-clock time on more) and cached.
    ``output``: a directory to write its ``latency.json`` to. ``progress`` is called with a line for each phase.

    Example:
        >>> lat = latency("sentence-transformers/all-MiniLM-L6-v2", runtime="onnx-int8", threads=1)  # doctest: +SKIP
        >>> lat.predict([6] * 6, [768] * 6) / lat.dense_ms()                                          # doctest: +SKIP
    """
    say = progress or (lambda line: None)
    check_arguments(runtime=runtime, batch_size=batch_size, seq_len=seq_len, threads=threads, rounds=rounds,
                    warmup=warmup, seed=seed)
    deployment = Deployment(runtime=runtime, batch_size=batch_size, seq_len=seq_len, threads=threads)
    if runtime != AUTO:
        target(runtime).runtime.require(export=True)  # one line naming the extra, before anything is read
    out = check_output_dir(output, overwrite=overwrite, inputs=(model,)) if output is not None else None
    config = load_config(model)
    geometry = original_geometry(config)
    check_positions(model, config, seq_len)
    check_memory(model, config, batch_size, seq_len)
    # --runtime auto: the deployment that runs this model fastest here (timed once, then cached)
    deployment = chosen_deployment(model, deployment, rounds=rounds, warmup=warmup, say=say)
    machine = machine_key(deployment.runtime)
    path = cache_file(geometry, deployment, machine)
    with measuring(path, say):  # one process measures a key at a time; the others then read its result
        result = None if refresh else cached(geometry, deployment, machine)
        narrower = hidden_widths(config, geometry)
        if result is not None and narrower and result.format < 2:  # an older ghostify's: the full hidden size only
            say(f"measured before on this machine at the full hidden size only: measuring again at "
                f"{len(narrower) + 1} hidden sizes")
            result = None
        if result is not None:
            say(f"measured before on this machine: {path} (--refresh measures again)")
        else:
            result = measure(probe_config(config), geometry, deployment, machine, rounds=rounds, warmup=warmup,
                             seed=seed, say=say)
            if store(path, result.to_dict()):
                say(f"cached as {path}")
    if out is not None:
        with atomic_directory(out, overwrite=overwrite) as tmp:
            result.save(tmp / LATENCY_FILE)
    return result


# ---- what is measured ------------------------------------------------------------------------------


def check_arguments(*, runtime: str = Deployment.runtime, batch_size: int = Deployment.batch_size,
                    seq_len: int = Deployment.seq_len, threads: int = Deployment.threads,
                    rounds: int = BenchDefaults.rounds, warmup: int = BenchDefaults.warmup,
                    seed: int = LatencyDefaults.seed, **_: object) -> None:
    """What :func:`latency` refuses of its arguments before reading anything."""
    Deployment(runtime=runtime, batch_size=batch_size, seq_len=seq_len, threads=threads).check(auto=True)
    for name, value, least in (("--rounds", rounds, 1), ("--warmup", warmup, 0), ("--seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise GhostifyError(f"{name} {value!r} must be a whole number of at least {least}")


checks_arguments(latency, check_arguments)


def original_geometry(config: Any) -> Geometry:
    """The geometry of the model ``config`` was made from: pruning keeps the original head and FFN
    sizes in the config (the record lists what is kept), drop-layers and prune-hidden say how many layers and
    channels there were; attention counted in units, as pruning counts it. The one description, which ``prune
    --speedup`` compares with (``methods.pruning.model_geometry``); a family ghostify cannot prune is refused."""
    return model_geometry(config, get_adapter(config), read_record(config))


def hidden_widths(config: Any, geometry: Geometry) -> list[int]:
    """The narrower hidden sizes the latency model is also measured at (a half and a quarter, each a multiple of
    the head count, as ``prune-hidden`` keeps); none where the family's hidden size cannot be cut."""
    if refusal(config, None) is not None:
        return []
    heads = get_adapter(config).num_heads(config)
    widths = {max(heads, heads * round(geometry.hidden_size / part / heads)) for part in (2, 4)}
    return sorted((w for w in widths if w < geometry.hidden_size), reverse=True)


def probe_config(config: Any) -> Any:
    """The config of the original architecture, without ghostify's record (what any method changed)."""
    if channel_origin(read_record(config)) is not None:
        raise GhostifyError("this model's hidden size was pruned (prune-hidden): measure the latency model on the model "
                            "it was pruned from (its history names it); the latency model describes that one")
    config = copy.deepcopy(config)
    if hasattr(config, RECORD_KEY):
        delattr(config, RECORD_KEY)
    return config


def probe_shapes(geometry: Geometry, narrower: Sequence[int] = ()) -> list[Shape]:
    """The probes the costs are fitted on: one and two layers; all, half and one head; all, half and an
    eighth of the neurons, so that the constant, the per-layer, per-head and per-neuron costs are each
    identifiable; and at each ``narrower`` hidden size a few of them again, so that what a residual channel
    saves of each cost is too."""
    units, ffn = geometry.num_heads, geometry.ffn_size
    half, n2, n8 = max(1, units // 2), max(1, ffn // 2), max(1, ffn // 8)
    grid = [(1, units, ffn, None), (1, half, ffn, None), (1, 1, ffn, None), (1, units, n2, None), (1, units, n8, None),
            (2, units, ffn, None), (2, 1, n8, None), (2, half, n2, None)]
    for hidden in narrower:  # four shapes whose (layers, heads, neurons) are independent: each saving identified
        grid += [(1, units, ffn, hidden), (1, 1, n8, hidden), (2, half, n2, hidden), (1, units, n8, hidden)]
    shapes: dict[tuple[int, int, int, int | None], Shape] = {}
    for layers, heads, neurons, hidden in grid:  # a one-head model repeats some: each is timed once
        name = f"{layers} layer(s), {heads} heads, {neurons} neurons" + (f", hidden {hidden}" if hidden else "")
        shapes.setdefault((layers, heads, neurons, hidden), Shape(name, (heads,) * layers, (neurons,) * layers, hidden))
    return list(shapes.values())


def validation_shapes(geometry: Geometry, *, per_layer: bool, narrower: Sequence[int] = ()) -> list[Shape]:
    """Whole models of full depth the fit does not see: dense, half width, (where the layers are
    distinct, ``per_layer``) a different width in every layer, and (with ``narrower`` hidden sizes) the
    dense model and the half-width one at the widest of them."""
    layers, units, ffn = geometry.num_layers, geometry.num_heads, geometry.ffn_size
    half_heads, half_ffn = (max(1, units // 2),) * layers, (max(1, ffn // 2),) * layers
    shapes = [Shape("dense", (units,) * layers, (ffn,) * layers), Shape("half width", half_heads, half_ffn)]
    if per_layer and layers > 1:
        heads = tuple(max(1, units - i * (units - 1) // (layers - 1)) for i in range(layers))
        neurons = tuple(max(1, ffn * (i + 1) // layers) for i in range(layers))
        shapes.append(Shape("non-uniform", heads, neurons))
    if narrower:
        shapes += [Shape(f"hidden {narrower[0]}", (units,) * layers, (ffn,) * layers, narrower[0]),
                   Shape(f"half width, hidden {narrower[0]}", half_heads, half_ffn, narrower[0])]
    return shapes


def build(config: Any, shape: Shape, seed: int) -> tuple[torch.nn.Module, GhostifyRecord]:
    """A model of ``config``'s class with ``shape``'s layers, random weights (seeded), pruned to its widths
    with the pruning method's own function, and its record."""
    adapter = get_adapter(config)
    layers = len(shape.heads)
    # keys with one entry per layer (ModernBERT's layer_types): the first ones, or where drop-layers left
    # fewer than this depth needs, the family's own default for it
    lists = {key: getattr(config, key, None) for key in adapter.per_layer_config_keys}
    short = [key for key, value in lists.items() if isinstance(value, list) and len(value) < layers]
    if short:
        data = {k: v for k, v in config.to_dict().items() if k not in short}
        config = type(config).from_dict({**data, adapter.num_layers_key: layers})
    config = copy.deepcopy(config)
    setattr(config, adapter.num_layers_key, layers)
    for key, value in lists.items():
        if key not in short and isinstance(value, list):
            setattr(config, key, value[:layers])
    cls = _auto_class(config, None)
    make = getattr(cls, "from_config", None) or cls._from_config
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        net = make(config).eval()
    distinct = adapter.layers(net)
    if len(distinct) != layers and (len(set(shape.heads)) > 1 or len(set(shape.neurons)) > 1):
        raise ValueError(f"{len(distinct)} distinct layers cannot keep {layers} different widths")
    heads, neurons = shape.heads[:len(distinct)], shape.neurons[:len(distinct)]
    record = prune_model(net, adapter, dense_record(net, adapter), [list(range(h)) for h in heads],
                         [list(range(n)) for n in neurons])
    if shape.hidden is not None:  # with the hidden-size method's own function, as prune-hidden cuts
        record = cut_hidden(net, record, list(range(shape.hidden)))
    return net, record


def measure(config: Any, geometry: Geometry, deployment: Deployment, machine: str, *, rounds: int, warmup: int,
            seed: int, say: Callable[[str], None]) -> LatencyModel:
    """Time the probes and the validation models (taking turns), fit the costs, and check them."""
    narrower = hidden_widths(config, geometry)
    probes = probe_shapes(geometry, narrower)
    checks = validation_shapes(geometry, per_layer=_distinct_layers(config) > 1, narrower=narrower)
    shapes = [*probes, *checks]
    previous = torch.get_num_threads()
    torch.set_num_threads(deployment.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="ghostify-latency-") as scratch:
            runs = []
            for i, shape in enumerate(shapes, 1):
                say(f"preparing {i}/{len(shapes)}: {shape.name}")
                runs.append(prepared_pass(config, shape, deployment, seed, Path(scratch) / f"{i:02d}"))
            say(f"timing {len(runs)} models x {rounds} rounds ({deployment.describe()})")
            wall, cpu = take_turns(runs, rounds=rounds, warmup=warmup)
    finally:
        torch.set_num_threads(previous)
    # on one thread, CPU time is the forward pass's own work: what other processes take of the machine
    # meanwhile does not count (on more threads, CPU time adds theirs up: wall-clock time then)
    clock = cpu if deployment.threads == 1 else wall
    rows = [{**shape.row(), "measured_ms": statistics.median(m), "wall_ms": statistics.median(w),
             "cpu_ms": statistics.median(c)} for shape, m, w, c in zip(shapes, clock, wall, cpu)]
    (base, layer, head, neuron), per_channel = fit_costs(rows[:len(probes)], geometry.hidden_size)
    result = LatencyModel(geometry=geometry, deployment=deployment, machine=machine, base_ms=base, layer_ms=layer,
                          head_ms=head, neuron_ms=neuron,
                          per_channel=ChannelCosts(*per_channel) if narrower else None)
    for row in rows:
        row["predicted_ms"] = result.predict(row["heads"], row["neurons"], row["hidden"])
    result.probes.extend(rows[:len(probes)])
    result.validation.extend({k: v for k, v in row.items() if k != "layers"} for row in rows[len(probes):])
    return result


def _distinct_layers(config: Any) -> int:
    """Distinct layers of a two-layer model of ``config`` (1 where the family shares them)."""
    adapter = get_adapter(config)
    return len(adapter.layers(build(config, Shape("two layers", (1, 1), (1, 1)), 0)[0]))


def prepared_pass(config: Any, shape: Shape, deployment: Deployment, seed: int, scratch: Path) -> Callable[[], Any]:
    """One forward pass of ``shape``'s model on a fixed batch, in the deployment's runtime (a graph is exported,
    checked, into ``scratch``, beside the config that running it reads)."""
    net, record = build(config, shape, seed)
    batch, length = deployment.batch_size, deployment.seq_len
    chosen = target(deployment.runtime)
    if chosen.graph is None:
        run = module_runner(net, batch, length)
    else:
        graph = _exported(net, record, chosen, scratch, calibration_length=length)
        _, run = guarded(shape.name, batch, length, lambda: runner_for(graph, batch, length, deployment.threads))
    return lambda: guarded(shape.name, batch, length, run)


def _exported(net: torch.nn.Module, record: GhostifyRecord, chosen: Target, scratch: Path, *,
              calibration_length: int) -> Path:
    """``net`` (saved as a checkpoint and read back by the export, as ``export`` reads a model) written as
    ``chosen``'s graph in ``scratch``, a calibrated int8 one on random ids (the probes' weights are random too);
    the path of the graph that runs."""
    checkpoint = scratch / "checkpoint"
    save_checkpoint(net, checkpoint, record)
    return Path(timed_graph(checkpoint, scratch / "graphs", chosen, seq_len=calibration_length))


# ---- the fit -------------------------------------------------------------------------------------

def features(heads: Sequence[int], neurons: Sequence[int], removed: int = 0) -> list[float]:
    """What a model's latency is linear in: a constant, its layers, its heads and its neurons (summed), and each
    of them times the residual channels ``removed`` (negated: a channel fewer saves time)."""
    counts = [1.0, float(len(heads)), float(sum(heads)), float(sum(neurons))]
    return [*counts, *(-c * removed for c in counts)]


def fit_costs(rows: Sequence[Mapping[str, Any]],
              hidden_size: int) -> tuple[tuple[float, float, float, float], tuple[float, float, float, float]]:
    """``base_ms, layer_ms, head_ms, neuron_ms`` at the full hidden size, and what one residual channel fewer saves
    of each, that best predict the rows' ``measured_ms`` from their per-layer ``heads`` and ``neurons`` and their
    ``hidden`` channels (least squares), none negative: a cost the noise makes negative is set to 0 and the
    others fitted again (an allocator must never gain time by keeping more). Without narrower rows the savings
    are 0 (their columns are 0: the least-squares solution of least norm)."""
    x = torch.tensor([features(r["heads"], r["neurons"], hidden_size - (r.get("hidden") or hidden_size))
                      for r in rows], dtype=torch.float64)
    y = torch.tensor([[float(r["measured_ms"])] for r in rows], dtype=torch.float64)
    active = list(range(x.shape[1]))
    while True:
        solution = torch.linalg.lstsq(x[:, active], y, driver="gelsd").solution.flatten().tolist()
        worst = min(range(len(active)), key=lambda i: solution[i])
        if solution[worst] >= 0 or len(active) == 1:
            break
        del active[worst]
    costs = [0.0] * x.shape[1]
    for column, value in zip(active, solution):
        costs[column] = max(0.0, value)
    return (costs[0], costs[1], costs[2], costs[3]), (costs[4], costs[5], costs[6], costs[7])


# ---- the cache -----------------------------------------------------------------------------------

def cache_file(geometry: Geometry, deployment: Deployment, machine: str) -> Path:
    """Where the latency model of ``geometry`` in ``deployment`` on ``machine`` is cached."""
    key = json.dumps({"geometry": asdict(geometry), "deployment": asdict(deployment), "machine": machine},
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return cache_dir() / "latency" / f"{geometry.family.replace('/', '-')}-{digest}.json"


def cached(geometry: Geometry, deployment: Deployment, machine: str) -> LatencyModel | None:
    """The cached latency model of this key, or None (a corrupt or mismatched file is ignored with a warning:
    :meth:`LatencyModel.load` validates it whole, so what is returned is safe to print and to allocate with)."""
    path = cache_file(geometry, deployment, machine)
    if not path.is_file():
        return None  # nothing there (or no file: writing the new one says why it was not cached)
    try:
        found = LatencyModel.load(path)
    except GhostifyError as exc:
        warnings.warn(f"ignoring the cached latency model {path}: {exc}", stacklevel=2)
        return None
    if (found.geometry, found.deployment, found.machine) != (geometry, deployment, machine):
        warnings.warn(f"ignoring the cached latency model {path}: it describes {found.geometry.describe()}, "
                      f"{found.deployment.describe()} on {found.machine}", stacklevel=2)
        return None
    return found


__all__ = ["CACHE_ENV", "cache_dir", "cache_file", "cached", "features", "fit_costs", "hidden_widths", "latency",
           "lock_file", "machine_key", "measuring", "original_geometry", "prepared_pass", "probe_shapes", "store",
           "validation_shapes"]
