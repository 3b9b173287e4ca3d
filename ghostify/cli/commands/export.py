from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...settings import MODULE_GROUPS, ExportDefaults
from ..app import app
from ..console import err, print_json
from ..options import Json, Model, Output, Overwrite, split_names


@app.command(
    epilog="Examples:\n\n"
    "ghostify export runs/quick/06-final -o runs/quick/hf  (then AutoModelForSequenceClassification.from_pretrained(..., trust_remote_code=True))\n\n"
    "ghostify export runs/quick/06-final -o runs/quick/onnx --format onnx --quantize int8\n\n"
    "ghostify export runs/quick/06-final -o runs/quick/hf --push-to-hub my-org/minilm-ghost --private\n\n"
    "ghostify eval runs/quick/onnx/model_int8.onnx --task sst2 --dataset ../shared/data/glue",
)
def export(
    model: Model,
    output: Output,
    format: Annotated[str, typer.Option("--format", help="hf: a transformers directory that loads without ghostify (trust_remote_code=True); onnx: an ONNX graph for ONNX Runtime.")] = ExportDefaults.format,
    quantize: Annotated[Optional[str], typer.Option("--quantize", help="int8: also write model_int8.onnx, ONNX Runtime dynamic quantisation (with --format onnx).", show_default=False)] = None,
    keep_fp32: Annotated[Optional[str], typer.Option("--keep-fp32", help="With --quantize int8: modules that stay fp32 in model_int8.onnx, comma-separated module names or fnmatch patterns of them (e.g. qa_outputs, '*.output.dense', bert.encoder.layer.5) or, in any family, one of the groups " + "; ".join(f"{name} ({what})" for name, what in MODULE_GROUPS.items()) + ". Everything inside a module named stays fp32.", show_default=False)] = None,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="Then upload the export to this Hugging Face Hub repository (ORG/NAME), as one commit; the repository is created if it does not exist.", show_default=False)] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push-to-hub: create the repository private.")] = False,
    revision: Annotated[Optional[str], typer.Option("--revision", help="With --push-to-hub: the branch to commit to (created from main if new).", show_default=False)] = None,
    token: Annotated[Optional[str], typer.Option("--token", help="With --push-to-hub: a token with write access (default: HF_TOKEN, or the one `hf auth login` saved).", show_default=False)] = None,
    overwrite: Overwrite = False,
    json_output: Json = False,
) -> None:
    """Write a compressed model so that it runs without ghostify, and check it.

    hf: `config.json` maps the Auto classes to `modeling_ghostify.py`, which rebuilds the
    recorded structure (heads, widths, ghosts, grouped and shared layers, factorised embeddings)
    with ghostify's own code copied beside it (it needs torch and transformers only). A model that
    a stock config describes (only a uniform FFN width changed) is written as a plain checkpoint.
    A sentence-transformers model keeps its layout (pooling, normalisation). The export is loaded
    in a fresh process where ghostify cannot be imported and compared with ghostify's loading.

    onnx: dynamic batch and sequence axes; checked against PyTorch on batches of other sizes,
    lengths and padding (fails above 1e-4). `--quantize int8` adds `model_int8.onnx`.

    Either writes a `README.md` model card (history, sizes, metrics, how to load it).
    `--push-to-hub ORG/NAME` then uploads the checked export (token and hub checked first).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.export(model, output, format=format, quantize=quantize,
                          keep_fp32=split_names(keep_fp32), push_to_hub=push_to_hub, private=private,
                          revision=revision, token=token, overwrite=overwrite)
    if json_output:
        print_json(result)
        return
    if format == "hf":
        kind = "a stock checkpoint (no custom code needed)" if result["stock"] else \
            f"custom code for {', '.join(result['auto_classes'])}"
        err.print(f"hf: {kind}; loaded without ghostify, largest difference {result['max_difference']:.1e}")
        if result.get("sentence_transformers"):
            err.print(f"sentence-transformers layout from {result['sentence_transformers']}")
    else:
        err.print(f"onnx: inputs {', '.join(result['inputs'])} -> {', '.join(result['outputs'])}; "
                  f"largest difference from PyTorch {result['max_difference']:.1e}")
        if result.get("int8_difference") is not None:
            kept = f"; {len(result['kept_fp32'])} graph nodes kept fp32" if result.get("kept_fp32") is not None else ""
            err.print(f"int8: largest difference from fp32 PyTorch {result['int8_difference']:.1e} (quantisation error){kept}")
    err.print(f"wrote {output}")
    if result.get("pushed"):
        err.print(f"pushed to {result['pushed']['url']} ({result['pushed']['revision']})")
