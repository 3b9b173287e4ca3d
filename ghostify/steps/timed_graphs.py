"""Graphs written only to be timed: a checkpoint as a deployment runs it, for ``latency``'s probes, the dense model
in every deployment (``bench --all-runtimes``, ``--runtime auto``) and ``compress``'s checks.

What is timed is which operations run in int8, not how well they are calibrated: a calibrated int8 quantisation
(OpenVINO's) reads a few training examples of the task where the caller has them, else random token ids.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..checkpoint import load_config, load_model
from ..export.onnx import example_batch, input_names, write_graph
from ..runtimes import INT8, Target
from ..settings import DataSettings, TaskSettings
from .export import export

#: training examples a calibrated int8 quantisation reads for a graph that is only timed (a shipped graph reads
#: ``export --calibration-samples``)
TIMING_CALIBRATION = 32
#: random-id batches it reads where no task data is given (the latency probes, whose weights are random too)
RANDOM_CALIBRATION = 8


def random_calibration(config: Any, inputs: list[str], length: int, count: int = RANDOM_CALIBRATION) -> list[dict]:
    """``count`` input batches of one unpadded sequence of ``length`` random token ids each (seeded: 0, 1, ...)."""
    return [{k: v.numpy() for k, v in example_batch(config, inputs, 1, length, seed=i, padded=False).items()}
            for i in range(count)]


def timed_graph(model: str | os.PathLike, directory: Path, chosen: Target, *, seq_len: int,
                data: DataSettings | None = None, task_settings: TaskSettings = TaskSettings()) -> str:
    """The checkpoint ``model`` as the deployment ``chosen`` runs it: the checkpoint itself, or its graph written
    into ``directory`` (which must not exist), with its int8 graph beside the full-precision one where ``chosen`` is
    int8. With ``data`` (and ``task_settings``: its columns), as ``ghostify export`` writes it (a calibrated int8 quantisation reads
    :data:`TIMING_CALIBRATION` training examples of its task); without, the bare graph and the config that running
    it reads, a calibrated quantisation reading random ids of ``seq_len`` tokens."""
    if chosen.graph is None:
        return str(model)
    quantize = INT8 if chosen.int8 else None
    calibrated = chosen.int8 and chosen.runtime.calibrated
    if data is not None:
        calibration: dict[str, Any] = {}
        if calibrated:
            calibration = {"task": data.task, "dataset": data.dataset, "text_columns": data.text_columns,
                           "label_column": data.label_column, "max_length": data.max_length,
                           "calibration_samples": TIMING_CALIBRATION, "task_settings": task_settings}
        export(model, directory, format=chosen.runtime.name, quantize=quantize, **calibration)
    else:
        net = load_model(model)
        directory.mkdir(parents=True)
        calibration_batches = random_calibration(net.config, input_names(net), seq_len) if calibrated else []
        write_graph(net, directory, chosen.runtime, pooling=None, quantize=quantize, calibration=calibration_batches)
        load_config(model).save_pretrained(directory)  # what bench reads of a graph: its vocabulary, its token types
    return str(directory / chosen.graph)


__all__ = ["RANDOM_CALIBRATION", "TIMING_CALIBRATION", "random_calibration", "timed_graph"]
