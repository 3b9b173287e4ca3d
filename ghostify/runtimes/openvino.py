"""OpenVINO: the checked ONNX graph converted to OpenVINO's IR (``model.xml`` and its fp32 weights
``model.bin``), and its int8 copy by NNCF post-training quantisation (``model_int8.xml``: static int8,
calibrated on examples of the task, with NNCF's transformer preset).

OpenVINO picks its arithmetic per CPU: bf16 where the CPU has it (AVX-512 BF16, AMX), else fp32. A
graph runs with that default (what ships); ``precision="f32"`` forces fp32 through
``INFERENCE_PRECISION_HINT``, as the export's check against PyTorch does.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import GhostifyError
from .base import Runtime, Usage, first_line, session_threads

#: OpenVINO's CPU device (the only one ghostify targets)
DEVICE = "CPU"


def _versions(int8: bool) -> list[str]:
    import openvino

    found = [f"openvino {openvino.__version__}"]
    if int8:  # the quantiser decides which operations run in int8
        import nncf

        found.append(f"nncf {nncf.__version__}")
    return found


def convert(onnx_file: Path, graph: Path) -> None:
    """The IR of the ONNX graph ``onnx_file``, its weights kept fp32 (OpenVINO would store them fp16)."""
    import openvino

    try:
        model = openvino.convert_model(str(onnx_file))
        openvino.save_model(model, str(graph), compress_to_fp16=False)
    except Exception as exc:  # the converter's errors share no class
        raise GhostifyError(f"OpenVINO could not convert the ONNX graph: {first_line(exc, 300)}; please report this "
                            "model (--format onnx works)") from exc


def quantize(source: Path, target: Path, *, calibration: Sequence[Mapping[str, Any]],
             keep: Mapping[str, Sequence[str]] | None = None) -> None:
    """NNCF post-training quantisation of the IR ``source`` (``nncf.quantize`` with the transformer preset:
    which operations run in int8 and the activations' ranges, from ``calibration``, one input batch each);
    the operations the ONNX nodes ``keep`` became stay in floating point."""
    import nncf
    import openvino

    if not calibration:
        raise GhostifyError("OpenVINO int8 quantisation calibrates on examples of the task, and none were given; "
                            "pass --task (and --dataset) with --calibration-samples 1 or more")
    nncf.set_log_level(logging.ERROR)
    try:
        # NNCF's progress bars write to stdout, which belongs to --json: they go to stderr
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            model = openvino.Core().read_model(str(source))
            names = kept_operations(model, keep or {})
            if keep and not names:
                raise GhostifyError(f"--keep-fp32 names ONNX nodes ({', '.join(keep)}) that OpenVINO's graph no longer "
                                    "shows; please report this model")
            scope = nncf.IgnoredScope(names=names) if names else None
            quantized = nncf.quantize(model, nncf.Dataset(list(calibration)), model_type=nncf.ModelType.TRANSFORMER,
                                      subset_size=len(calibration), **({"ignored_scope": scope} if scope else {}))
            openvino.save_model(quantized, str(target), compress_to_fp16=False)
    except GhostifyError:
        raise
    except Exception as exc:  # NNCF raises anything; say where it happened
        raise GhostifyError(f"NNCF int8 quantisation failed ({', '.join(_versions(True))}): {first_line(exc, 300)}; "
                            "the fp32 graph is fine: export without --quantize, or time and ship with --runtime "
                            "openvino") from exc


def kept_operations(model: Any, keep: Mapping[str, Sequence[str]]) -> list[str]:
    """The operations of the IR ``model`` that the ONNX nodes ``keep`` became: named as the node (a ``Gemm`` is a
    ``MatMul`` named ``NODE/WithoutBiases`` and an ``Add`` named ``NODE``), or computing one of its output
    tensors (an operation that computes a graph output takes that output's name)."""
    tensors = {t for outputs in keep.values() for t in outputs}
    found = []
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        ours = any(name == node or name.startswith(node + "/") for node in keep)
        if ours or any(tensors & set(output.get_names()) for output in op.outputs()):
            found.append(name)
    return found


class OvSession:
    """A graph compiled for OpenVINO's CPU device, for latency (``PERFORMANCE_HINT: LATENCY``), on ``threads``
    threads (None: as many as torch's); ``precision`` "f32" forces fp32 arithmetic. One infer request, reused."""

    def __init__(self, path: Path, *, threads: int | None = None, precision: str | None = None,
                 spinning: bool = True) -> None:
        import openvino

        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": session_threads(threads)}
        if precision is not None:
            config["INFERENCE_PRECISION_HINT"] = precision
        core = openvino.Core()
        self.compiled = core.compile_model(core.read_model(str(path)), DEVICE, config)
        self.request = self.compiled.create_infer_request()
        self.inputs = [i.get_any_name() for i in self.compiled.inputs]
        self.outputs = [o.get_any_name() for o in self.compiled.outputs]
        self.precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        result = self.request.infer(dict(feeds))
        return [result[o].copy() for o in self.compiled.outputs]  # the request's buffers are reused by the next run


def reduced_precision() -> str | None:
    """The precision OpenVINO computes in on this CPU by default, where it is not fp32 ("bf16")."""
    import openvino

    precision = openvino.Core().get_property(DEVICE, "INFERENCE_PRECISION_HINT").get_type_name()
    return None if precision == "f32" else precision


def _usage(usage: Usage) -> str:
    kept = f"; kept in floating point: {', '.join(f'`{m}`' for m in usage.fp32_modules)}" if usage.fp32_modules else ""
    files = "\n".join(f"- `{f}` and its weights `{Path(f).with_suffix('.bin')}`"
                      + (f" (int8, NNCF post-training quantisation{kept})" if "int8" in f else " (fp32 weights)")
                      for f in usage.files)
    outputs = ", ".join(f"`{o}`" for o in usage.outputs)
    feeds = ", ".join(f'"{i}": batch["{i}"]' for i in usage.inputs)
    graph = usage.files[-1] if usage.files else RUNTIME.graph
    fetch = ""
    path = f'"{usage.name}/{graph}"'
    if usage.pushed:
        weights = Path(graph).with_suffix(".bin")
        fetch = "from huggingface_hub import hf_hub_download\n"
        path = f'hf_hub_download("{usage.name}", "{graph}")'
        fetch_weights = f'hf_hub_download("{usage.name}", "{weights}")  # beside the graph, where OpenVINO reads it\n'
    else:
        fetch_weights = ""
    return (f"With OpenVINO (dynamic batch and sequence axes; outputs {outputs}; bf16 arithmetic where the CPU has "
            f"it, unless `INFERENCE_PRECISION_HINT` is `f32`):\n\n{files}\n\n"
            f"```python\nimport openvino\n{fetch}from transformers import AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{usage.name}")\n{fetch_weights}'
            f'model = openvino.Core().compile_model({path}, "CPU", {{"PERFORMANCE_HINT": "LATENCY"}})\n'
            f'batch = tokenizer(["A sentence."], return_tensors="np")\n'
            f"outputs = model({{{feeds}}})\n```")


RUNTIME = Runtime(
    name="openvino",
    title="OpenVINO",
    format_title="OpenVINO",
    summary="OpenVINO's IR (model.xml and model.bin, fp32 weights; bf16 arithmetic where the CPU has it)",
    extra="openvino",
    packages=("openvino",),
    export_packages=("onnx", "onnxscript", "nncf"),
    versions=_versions,
    graph="model.xml",
    int8_graph="model_int8.xml",
    int8_summary="NNCF post-training quantisation, static int8 calibrated on --calibration-samples training "
                 "examples of --task",
    calibrated=True,
    companions=(".bin",),
    library="openvino",
    convert=convert,
    quantize=quantize,
    load=OvSession,
    reduced_precision=reduced_precision,
    usage=_usage,
)
