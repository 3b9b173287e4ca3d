"""ONNX Runtime: the checked ONNX graph itself (``model.onnx``), and its dynamically quantised copy
(``model_int8.onnx``: int8 weights, activations quantised at run time; no calibration data)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import GhostifyError
from .base import Runtime, Usage, first_line, session_threads


def _versions(int8: bool) -> list[str]:
    import onnxruntime

    return [f"onnxruntime {onnxruntime.__version__}"]


class OrtSession:
    """An ONNX Runtime CPU session (``session``: the ``InferenceSession``)."""

    def __init__(self, path: Path, *, threads: int | None = None, precision: str | None = None,
                 spinning: bool = True) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = session_threads(threads)
        options.inter_op_num_threads = 1
        # ``spinning=False`` lets its worker threads sleep as soon as a run ends (``bench``: sessions that take
        # turns must not busy-wait beside the one running); ``precision``: ONNX Runtime's CPU kernels compute
        # fp32 already
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        return self.session.run(None, dict(feeds))


def quantize_int8(source: Path, target: Path, *, calibration: Sequence[Mapping[str, Any]] = (),
                  keep: Mapping[str, Sequence[str]] | Sequence[str] = ()) -> None:
    """ONNX Runtime dynamic quantisation (int8 weights, activations quantised at run time: ``calibration`` is
    not read), after the pre-processing ONNX Runtime recommends (symbolic shape inference and graph
    optimisation); the nodes ``keep`` names stay fp32 (its ``nodes_to_exclude``: pre-processing keeps names)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = target.with_name(target.stem + ".prep.onnx")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # ONNX shape inference and graph optimisation; the symbolic shape inference cannot follow
            # the dynamo exporter's symbolic dimensions and adds nothing for dynamic quantisation
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8,
                             nodes_to_exclude=[*_grouped_convolutions(prepared), *keep])
    except Exception as exc:  # ONNX Runtime's tools raise anything; say where it happened
        raise GhostifyError(f"ONNX Runtime int8 quantisation failed ({_quantiser_versions()}): "
                            f"{first_line(exc, 300)}; the fp32 graph is fine: export without --quantize, or time and "
                            "ship with --runtime onnx") from exc
    finally:
        prepared.unlink(missing_ok=True)


def _quantiser_versions() -> str:
    """The versions a quantisation failure depends on (one such stack: torch 2.11's graphs in onnxruntime 1.30's
    quantiser fail its shape inference, where torch 2.13's in onnxruntime 1.32 quantise)."""
    import onnx
    import torch

    return ", ".join([*_versions(True), f"onnx {onnx.__version__}", f"torch {torch.__version__}"])


def _grouped_convolutions(path: Path) -> list[str]:
    """The grouped ``Conv`` nodes (depthwise ghost modules), which stay fp32: as ``ConvInteger``
    they would lose ONNX Runtime's blocked-layout kernel, its fused ReLU and the reorders that
    replace their transposes, and quantising a 3-tap kernel saves nothing worth its error."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [node.name for node in model.graph.node if node.op_type == "Conv" and node.name
            and any(a.name == "group" and a.i > 1 for a in node.attribute)]


def _usage(usage: Usage) -> str:
    feeds = ", ".join(f'"{i}": batch["{i}"]' for i in usage.inputs)
    kept = f"; fp32: {', '.join(f'`{m}`' for m in usage.fp32_modules)}" if usage.fp32_modules else ""
    files = "\n".join(f"- `{f}`" + (f" (int8 weights, ONNX Runtime dynamic quantisation{kept})" if "int8" in f else " (fp32)")
                      for f in usage.files)
    outputs = ", ".join(f"`{o}`" for o in usage.outputs)
    graph = usage.files[0] if usage.files else RUNTIME.graph
    fetch, path = (("from huggingface_hub import hf_hub_download\n", f'hf_hub_download("{usage.name}", "{graph}")')
                   if usage.pushed else ("", f'"{usage.name}/{graph}"'))
    return (f"With ONNX Runtime (dynamic batch and sequence axes; outputs {outputs}):\n\n{files}\n\n"
            f"```python\nimport onnxruntime\n{fetch}from transformers import AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{usage.name}")\n'
            f"session = onnxruntime.InferenceSession({path})\n"
            f'batch = tokenizer(["A sentence."], return_tensors="np")\n'
            f"outputs = session.run(None, {{{feeds}}})\n```")


RUNTIME = Runtime(
    name="onnx",
    title="ONNX Runtime",
    format_title="ONNX",
    summary="an ONNX graph for ONNX Runtime (model.onnx)",
    extra="export",
    packages=("onnx", "onnxruntime"),
    export_packages=("onnxscript",),
    versions=_versions,
    graph="model.onnx",
    int8_graph="model_int8.onnx",
    int8_summary="ONNX Runtime dynamic quantisation: int8 weights, activations quantised at run time",
    library="onnx",
    quantize=quantize_int8,
    load=OrtSession,
    usage=_usage,
)
