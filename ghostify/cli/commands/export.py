from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...runtimes import graph_runtimes
from ...settings import MODULE_GROUPS, DataSettings, ExportDefaults, TaskSettings
from ..app import app
from ..console import err, print_json
from ..options import (
    Dataset,
    Json,
    LabelColumn,
    MaxLength,
    Model,
    Output,
    Overwrite,
    Task,
    TextColumns,
    split_names,
)
from ..settings_options import settings_options

_FORMATS = "; ".join(f"{r.name}: {r.summary}" for r in graph_runtimes())
_INT8 = "; ".join(f"--format {r.name}: {r.int8_graph}, {r.int8_summary}" for r in graph_runtimes() if r.int8_graph)
_CALIBRATED = [r.name for r in graph_runtimes() if r.int8_graph and r.calibrated]


@app.command(
    epilog="Examples:\n\n"
    "ghostify export runs/quick/06-final -o runs/quick/hf  (then AutoModelForSequenceClassification.from_pretrained(..., trust_remote_code=True))\n\n"
    "ghostify export runs/quick/06-final -o runs/quick/onnx --format onnx --quantize int8\n\n"
    + "".join(f"ghostify export runs/quick/06-final -o runs/quick/{name} --format {name} --quantize int8 --task sst2 "
              "--dataset ../shared/data/glue\n\n" for name in _CALIBRATED) +
    "ghostify export runs/quick/06-final -o runs/quick/hf --push-to-hub my-org/minilm-ghost --private\n\n"
    "ghostify export out/ner -o out/ner-openvino --format openvino --quantize int8 --dataset my_ner.jsonl --task conll2003 --tokens-column words --tags-column labels\n\n"
    "ghostify eval runs/quick/onnx/model_int8.onnx --task sst2 --dataset ../shared/data/glue",
)
@settings_options
def export(
    model: Model,
    output: Output,
    *,
    format: Annotated[str, typer.Option("--format", help="hf: a transformers directory that loads without ghostify (trust_remote_code=True); " + _FORMATS + ".")] = ExportDefaults.format,
    quantize: Annotated[Optional[str], typer.Option("--quantize", help="int8: also write the int8 graph (" + _INT8 + ").", show_default=False)] = None,
    keep_fp32: Annotated[Optional[str], typer.Option("--keep-fp32", help="With --quantize int8: modules that stay in floating point in the int8 graph, comma-separated module names or fnmatch patterns of them (e.g. qa_outputs, '*.output.dense', bert.encoder.layer.5) or, in any family, one of the groups " + "; ".join(f"{name} ({what})" for name, what in MODULE_GROUPS.items()) + ". Everything inside a module named stays fp32.", show_default=False)] = None,
    task: Task = None,
    dataset: Dataset = DataSettings.dataset,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    max_length: MaxLength = DataSettings.max_length,
    calibration_samples: Annotated[int, typer.Option("--calibration-samples", min=1, help="With --quantize int8 of a runtime whose int8 graph is calibrated (" + ", ".join(_CALIBRATED) + "): training examples of --task (a seeded random subset) that set the int8 ranges; --task defaults to the one the model's history names.")] = ExportDefaults.calibration_samples,
    task_settings: TaskSettings,
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

    A runtime's format (onnx, ...: see --format): its graph, with dynamic batch and sequence axes;
    checked against PyTorch in fp32 on batches of other sizes, lengths and padding (fails above
    1e-4). `--quantize int8` adds its int8 graph (see --quantize); a calibrated one reads
    --calibration-samples training examples of --task (a dataset without a preset: its columns
    as for training, e.g. --tokens-column, --question-column).

    Either writes a `README.md` model card (history, sizes, metrics, how to load it).
    `--push-to-hub ORG/NAME` then uploads the checked export (token and hub checked first).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.export(model, output, format=format, quantize=quantize,
                          keep_fp32=split_names(keep_fp32), task=task, dataset=dataset,
                          text_columns=text_columns, label_column=label_column, max_length=max_length,
                          calibration_samples=calibration_samples, task_settings=task_settings,
                          push_to_hub=push_to_hub, private=private, revision=revision, token=token, overwrite=overwrite)
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
        err.print(f"{format}: inputs {', '.join(result['inputs'])} -> {', '.join(result['outputs'])}; "
                  f"largest difference from PyTorch {result['max_difference']:.1e} (fp32)")
        if result.get("precision") is not None:
            err.print(f"{result['precision']['name']}, {format}'s default arithmetic on this CPU: largest difference "
                      f"{result['precision']['difference']:.1e}")
        if result.get("int8_difference") is not None:
            kept = f"; {len(result['kept_fp32'])} graph nodes kept fp32" if result.get("kept_fp32") is not None else ""
            err.print(f"int8: largest difference from fp32 PyTorch {result['int8_difference']:.1e} (quantisation error){kept}")
    err.print(f"wrote {output}")
    if result.get("pushed"):
        err.print(f"pushed to {result['pushed']['url']} ({result['pushed']['revision']})")
