"""What a runtime declares: the contract between ``ghostify.runtimes`` and one runtime's module.

A :class:`Runtime` is plain data and hooks. Its module imports no torch and no runtime package at
module level (the CLI lists the runtimes in ``--help``, which must not load them); the hooks import
what they need when they are called, after :meth:`Runtime.require` has checked it is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import GhostifyError

#: the suffix of a deployment that runs a runtime's int8 graph (``onnx-int8``)
INT8 = "int8"


class Session(Protocol):
    """A loaded graph: its input and output names, and one forward pass on numpy arrays."""

    inputs: list[str]
    outputs: list[str]

    def run(self, feeds: Mapping[str, Any]) -> list[Any]: ...


@dataclass(frozen=True)
class Usage:
    """What a model card's usage section of a graph export needs."""

    name: str  # the export's directory name or hub repository
    files: tuple[str, ...]  # the graphs it holds
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    pushed: bool  # ``name`` is a hub repository
    fp32_modules: tuple[str, ...] = ()  # export --keep-fp32


@dataclass(frozen=True)
class Runtime:
    """One runtime a model ships in: its names, how it is installed, how a graph is written, quantised,
    loaded, run and versioned. ``graph`` None: the runtime runs the checkpoint itself (PyTorch)."""

    name: str  # ``export --format NAME``, and the deployment (``--runtime NAME``) of its full-precision graph
    title: str  # how messages and model cards name it: "ONNX Runtime"
    #: how messages name what its export holds ("an ONNX export", "ONNX model x.onnx does not exist")
    format_title: str
    summary: str  # one line for ``--help``: what the export writes
    #: the pip extra that installs it (``pip install "ghostify[EXTRA]"``); None: ghostify's own dependencies
    extra: str | None
    #: the modules running its graphs needs, and those writing them needs too (the ONNX exporter, a quantiser)
    packages: tuple[str, ...]
    export_packages: tuple[str, ...] = ()
    #: the versions its timings depend on ("onnxruntime 1.23.2"), ``int8`` for its int8 graph: part of a latency
    #: model's cache key and of what ``bench`` and cards report
    versions: Callable[[bool], list[str]] = lambda int8: []
    graph: str | None = None  # the full-precision graph an export writes ("model.onnx")
    int8_graph: str | None = None  # the int8 graph ``--quantize int8`` adds (None: no int8)
    #: what its int8 graph is, for ``--help`` and cards ("dynamic quantisation: ...")
    int8_summary: str = ""
    #: its int8 quantisation reads examples of the task (static quantisation): ``export`` needs ``--task``
    calibrated: bool = False
    #: the files beside a graph that belong to it, by suffix (a weights file ``model.bin`` beside ``model.xml``)
    companions: tuple[str, ...] = ()
    library: str = ""  # the model card's ``library_name`` of its exports
    #: ``convert(onnx_file, graph_file)``: its graph from the checked ONNX graph (None: the ONNX graph is its graph)
    convert: Callable[[Path, Path], None] | None = None
    #: ``quantize(graph_file, int8_file, calibration=[feeds...], keep={onnx node: [its output tensors]})``: the
    #: int8 graph, the nodes ``keep`` names (of the ONNX graph it was made from) left in floating point
    quantize: Callable[..., None] | None = None
    #: ``load(graph_file, threads=None, precision=None, spinning=True) -> Session``; ``precision="f32"`` forces
    #: fp32 arithmetic where the runtime would pick a lower precision on this CPU
    load: Callable[..., Session] | None = None
    #: the precision it computes in by default on this CPU when that is not fp32 ("bf16"), else None
    reduced_precision: Callable[[], str | None] = lambda: None
    #: the usage section of an export's model card
    usage: Callable[[Usage], str] | None = None

    # ---- names ------------------------------------------------------------------------------
    @property
    def deployments(self) -> tuple[str, ...]:
        """The ``--runtime`` names it serves: its full-precision graph, and its int8 graph where it has one."""
        return (self.name, *((f"{self.name}-{INT8}",) if self.int8_graph else ()))

    @property
    def suffix(self) -> str | None:
        """The file suffix of its graphs (".onnx", ".xml")."""
        return Path(self.graph).suffix if self.graph else None

    def files(self, graph: str) -> list[str]:
        """The files of one graph: itself and its companions."""
        return [graph, *(str(Path(graph).with_suffix(s)) for s in self.companions)]

    # ---- installation -----------------------------------------------------------------------
    def missing(self, *, export: bool = False) -> list[str]:
        """The packages it needs (to run its graphs; with ``export``, to write them too) that are not installed."""
        needed = [*self.packages, *(self.export_packages if export else ())]
        return [name for name in dict.fromkeys(needed) if importlib.util.find_spec(name) is None]

    def require(self, *, export: bool = False) -> None:
        """Refuse in one line, naming the extra to install, when a package it needs is missing."""
        missing = self.missing(export=export)
        if missing:
            what = "exporting to" if export else "running"
            install = f'pip install "ghostify[{self.extra}]"' if self.extra else "pip install " + " ".join(missing)
            raise GhostifyError(f"{what} {self.title} needs {', '.join(missing)}, which "
                                f"{'is' if len(missing) == 1 else 'are'} not installed; run {install}")


@dataclass(frozen=True)
class Target:
    """A deployment: a runtime and which of its graphs runs (full precision, or int8)."""

    runtime: Runtime
    int8: bool = False

    @property
    def name(self) -> str:
        """The ``--runtime`` name: ``onnx``, ``onnx-int8``, ``pytorch``."""
        return f"{self.runtime.name}-{INT8}" if self.int8 else self.runtime.name

    @property
    def label(self) -> str:
        """How ``bench`` and reports name it: ``onnx``, ``onnx (int8)``."""
        return f"{self.runtime.name} ({INT8})" if self.int8 else self.runtime.name

    @property
    def title(self) -> str:
        """How a sentence names it: ``ONNX Runtime int8``, ``OpenVINO``, ``PyTorch``."""
        return f"{self.runtime.title} {INT8}" if self.int8 else self.runtime.title

    @property
    def graph(self) -> str | None:
        """The file an export writes for it (None: the checkpoint runs)."""
        return self.runtime.int8_graph if self.int8 else self.runtime.graph

    def versions(self) -> list[str]:
        return self.runtime.versions(self.int8)


def session_threads(threads: int | None) -> int:
    """The threads a graph runtime's session computes on: ``threads``, else as many as torch's CPU work in this
    process (one per core, ``OMP_NUM_THREADS``, or what the caller set with ``torch.set_num_threads``): one setting
    for every runtime in a process, where ONNX Runtime's and OpenVINO's own default would take every core beside
    it (two test workers of one thread each then ran four threads on two cores)."""
    if threads:
        return threads
    import torch  # already imported by whatever made the graph; kept off this module's import for `--help`

    return torch.get_num_threads()


def feeds_for(session: Session, batch: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The numpy inputs ``session`` takes from ``batch`` (tensors or arrays): a missing ``token_type_ids`` is
    zeros (one segment), any other missing input is refused."""
    feeds = {}
    for name in session.inputs:
        value = batch.get(name)
        if value is None and name == "token_type_ids":
            value = 0 * batch["input_ids"]
        if value is None:
            raise GhostifyError(f"the graph {where} needs the input {name!r}, which the batch lacks")
        feeds[name] = value.detach().cpu().numpy() if hasattr(value, "detach") else value
    return feeds


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an error a runtime raised (they are often pages long)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


__all__ = ["INT8", "Runtime", "Session", "Target", "Usage", "feeds_for", "first_line", "session_threads"]
