"""``ghostify export``: a compressed model that runs without ghostify (Transformers, ONNX Runtime)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import load_config, load_model, read_record
from ..errors import GhostifyError
from ..export.hf import write_hf
from ..export.onnx import example_batch, input_names, require_onnx, write_onnx
from ..files import atomic_directory, check_output_dir, copy_tokenizer
from ..pooling import Pooling, sentence_transformers_source

FORMATS = ("hf", "onnx")
QUANTIZATIONS = ("int8",)
#: the largest difference from ghostify's own loading an hf export may show
HF_TOLERANCE = 1e-5


def export(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    format: str = "hf",
    quantize: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``model`` so that it runs without ghostify, and check that it computes what ghostify
    computes: ``format="hf"`` loads with ``AutoModel...from_pretrained(output, trust_remote_code=True)``
    (checked in a fresh process where ghostify cannot be imported); ``format="onnx"`` runs in ONNX
    Runtime (checked on batches of other shapes), with ``quantize="int8"`` also a dynamically
    quantised copy. Returns what was written and the largest differences measured.

    Example:
        >>> export("runs/quick/06-final", "runs/quick/hf")                                  # doctest: +SKIP
        >>> export("runs/quick/06-final", "runs/quick/onnx", format="onnx", quantize="int8")  # doctest: +SKIP
    """
    if format not in FORMATS:
        raise GhostifyError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise GhostifyError(f"--quantize {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
    if quantize is not None and format != "onnx":
        raise GhostifyError(f"--quantize {quantize} quantises an ONNX graph; add --format onnx")
    if format == "onnx":
        require_onnx()
    # the sentence-transformers model it came from is read too (its pooling, normalisation)
    origin = sentence_transformers_source(Path(model), read_record(load_config(model)))
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, *([origin] if origin else [])))
    net = load_model(model)
    result: dict[str, Any] = {"model": str(model), "output": str(out), "format": format, "class": type(net).__name__}
    with atomic_directory(out, overwrite=overwrite) as tmp:
        if format == "hf":
            written = write_hf(net, tmp, source=model, sentence_transformers=origin)
            result.update(stock=written.stock, auto_classes=written.classes,
                          sentence_transformers=written.sentence_transformers)
            result["max_difference"] = check_hf(net, tmp, written.auto_class, code=not written.stock)
            if result["max_difference"] > HF_TOLERANCE:
                raise GhostifyError(f"the exported model differs from ghostify's by {result['max_difference']:.2e} "
                                    f"(more than {HF_TOLERANCE:g}); please report this model")
        else:
            written_onnx = write_onnx(net, tmp, pooling=Pooling.read(origin) if origin else None, quantize=quantize)
            net.config.save_pretrained(tmp)  # labels and sizes, for `ghostify eval` and users
            copy_tokenizer(model, tmp)
            result.update(inputs=written_onnx.inputs, outputs=written_onnx.outputs, files=written_onnx.files,
                          max_difference=written_onnx.max_difference, int8_difference=written_onnx.int8_difference)
    return result


_CHECK = textwrap.dedent("""
    import json, sys, tempfile, warnings
    import torch

    class NoGhostify:  # the export must not need ghostify
        def find_spec(self, name, path=None, target=None):
            if name == "ghostify" or name.startswith("ghostify."):
                raise ImportError("ghostify is not available to an exported model")

    sys.meta_path.insert(0, NoGhostify())
    warnings.simplefilter("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    directory, auto_name, io_path, trust = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    auto_class = getattr(transformers, auto_name)
    data = torch.load(io_path)

    def worst_difference(model):
        worst = 0.0
        with torch.no_grad():
            for batch, expected in zip(data["batches"], data["outputs"]):
                for g, e in zip(model(**batch).to_tuple(), expected):
                    worst = max(worst, float((g - e).abs().max()))
        return worst

    model = auto_class.from_pretrained(directory, trust_remote_code=trust).eval()
    worst = worst_difference(model)
    with tempfile.TemporaryDirectory() as again:  # what the loaded model saves loads the same way
        model.save_pretrained(again)
        worst = max(worst, worst_difference(auto_class.from_pretrained(again, trust_remote_code=trust).eval()))
    print(json.dumps({"max_difference": worst, "class": type(model).__name__}))
""")


@torch.no_grad()
def check_hf(net: torch.nn.Module, directory: Path, auto_name: str, *, code: bool) -> float:
    """Load ``directory`` in a fresh Python where ghostify cannot be imported, through the Auto
    class ``auto_name``, save it with ``save_pretrained`` and load that too; return the largest
    difference of either from ``net`` on padded batches."""
    inputs = input_names(net)
    batches = [example_batch(net.config, inputs, 3, 11, seed=1), example_batch(net.config, inputs, 2, 6, seed=2, padded=False)]
    outputs = [tuple(t for t in net(**b).to_tuple() if isinstance(t, torch.Tensor)) for b in batches]
    with tempfile.TemporaryDirectory() as scratch:
        io_path = Path(scratch) / "io.pt"
        torch.save({"batches": batches, "outputs": outputs}, io_path)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        env.update(HF_MODULES_CACHE=str(Path(scratch) / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        result = subprocess.run([sys.executable, "-c", _CHECK, str(directory), auto_name, str(io_path), "1" if code else "0"],
                                capture_output=True, text=True, cwd=scratch, env=env, timeout=600)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GhostifyError(f"the exported model does not load without ghostify: {last}; please report this model")
    return float(json.loads(result.stdout.strip().splitlines()[-1])["max_difference"])


__all__ = ["FORMATS", "QUANTIZATIONS", "check_hf", "export"]
