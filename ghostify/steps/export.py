"""``ghostify export``: a compressed model that runs without ghostify (Transformers, or a runtime of
``ghostify.runtimes``: ONNX Runtime, ...)."""

from __future__ import annotations

import copy
import errno
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..card import CardFacts, check_card, model_size, read_training, write_card
from ..checkpoint import load_config, load_model, model_record, read_record
from ..console import err
from ..data import load_split
from ..errors import GhostifyError
from ..export.hf import QUIET_TRANSFORMERS, WITHOUT_GHOSTIFY, drop_auto_map, write_hf
from ..export.onnx import example_batch, input_names, resolve_keep_fp32, write_graph
from ..files import atomic_directory, check_output_dir, copy_tokenizer
from ..flatten import checks_arguments
from ..hub import hub_target, push_folder
from ..methods import export_refusals
from ..pooling import Pooling, export_layout_source, read_modules
from ..runtimes import INT8, Runtime, graph_of, graph_runtimes, runtime
from ..settings import DEFAULT_DATASET, DataSettings, ExportDefaults, TaskSettings
from ..tasks import dataset_for
from ..tokenization import check_max_length, load_tokenizer
from .evaluate import recorded_task
from .training_common import task_kind

#: what --quantize can ask for (of a runtime that has an int8 graph)
QUANTIZATIONS = (INT8,)
#: the largest difference from ghostify's own loading an hf export may show
HF_TOLERANCE = 1e-5


def export(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    format: str = ExportDefaults.format,
    quantize: str | None = None,
    keep_fp32: tuple[str, ...] | None = None,
    task: str | None = None,
    dataset: str = DataSettings.dataset,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    max_length: int = DataSettings.max_length,
    calibration_samples: int = ExportDefaults.calibration_samples,
    task_settings: TaskSettings = TaskSettings(),
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``model`` so that it runs without ghostify, and check that it computes what ghostify
    computes: ``format="hf"`` loads with ``AutoModel...from_pretrained(output, trust_remote_code=True)``
    (checked in a fresh process where ghostify cannot be imported); ``format="onnx"`` (or another
    runtime of ``ghostify.runtimes``) writes that runtime's graph (checked against PyTorch in fp32 on
    batches of other shapes), with ``quantize="int8"`` also its int8 copy, in which the modules
    ``keep_fp32`` names (module names, fnmatch patterns of them, e.g. ``("qa_outputs",)``, or the
    family-independent groups of ``settings.MODULE_GROUPS``, e.g. ``task-head``) stay in floating
    point. A runtime whose int8 quantisation is calibrated (static int8) reads
    ``calibration_samples`` training examples of ``task`` on ``dataset`` (``text_columns``,
    ``label_column``, ``max_length`` and ``task_settings``' columns as for training; no task: the one
    the checkpoint's history names). Either writes a ``README.md`` model card. ``push_to_hub="org/name"``
    then uploads the finished directory as one commit (``private``: a new repository is private; ``revision``: a
    branch; ``token``: default HF_TOKEN or the saved login), checked before the export starts.
    Returns what was written, the largest differences measured and where it was pushed.

    Example:
        >>> export("runs/quick/06-final", "runs/quick/hf")                                  # doctest: +SKIP
        >>> export("runs/quick/06-final", "runs/quick/onnx", format="onnx", quantize="int8")  # doctest: +SKIP
        >>> export("runs/quick/06-final", "runs/quick/hf", push_to_hub="my-org/minilm-ghost")  # doctest: +SKIP
    """
    check_arguments(format=format, quantize=quantize, keep_fp32=keep_fp32, calibration_samples=calibration_samples)
    target = runtime(format) if format != "hf" else None
    keep_fp32 = tuple(keep_fp32 or ())
    calibrated = target is not None and quantize == INT8 and target.calibrated
    if target is not None:
        target.require(export=True)
    found = graph_of(model)
    if found is not None:
        raise GhostifyError(f"{model} is an {found[0].runtime.format_title} export, which export cannot read back; export the "
                            "checkpoint it was made from")
    record = read_record(load_config(model))
    refusals = export_refusals(record, format) if record is not None else []
    if refusals:  # a method whose structure the format cannot carry
        raise GhostifyError(f"{model} {refusals[0]}")
    # the sentence-transformers model it came from is read too (its pooling, normalisation)
    origin = export_layout_source(Path(model), record)
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, *([origin] if origin else [])))
    if origin is not None:  # its layout is checked before any work: paths inside it, the pooling ONNX computes
        read_modules(origin)
    if push_to_hub is None and (private or revision is not None or token is not None):
        raise GhostifyError("--private, --revision and --token go with --push-to-hub ORG/NAME; add it or drop them")
    hub = hub_target(push_to_hub, private=private, revision=revision, token=token) if push_to_hub else None
    pooling = Pooling.read(origin) if origin is not None and target is not None else None
    data = DataSettings(task=task, dataset=dataset, text_columns=text_columns, label_column=label_column,
                        max_length=max_length)
    # the examples are read before the model: a dataset that does not fit the task is refused first
    examples = _calibration_rows(model, data, task_settings, calibration_samples) if calibrated else None
    net = load_model(model)
    kept_modules = resolve_keep_fp32(net, keep_fp32)
    calibration = examples(input_names(net)) if examples is not None else []
    result: dict[str, Any] = {"model": str(model), "output": str(out), "format": format, "class": type(net).__name__}
    facts = CardFacts(name=push_to_hub or out.name, config=net.config, record=model_record(net), size=model_size(net),
                      training=read_training(Path(model)), output=format, pushed=push_to_hub is not None)
    with atomic_directory(out, overwrite=overwrite) as tmp:
        if format == "hf":
            written = write_hf(net, tmp, source=model, sentence_transformers=origin)
            result.update(stock=written.stock, auto_classes=written.classes,
                          sentence_transformers=written.sentence_transformers)
            facts.code, facts.sentence_transformers = not written.stock, origin is not None
            write_card(tmp, facts)  # before the check, which reads it back without ghostify
            result["max_difference"] = check_hf(net, tmp, written.auto_class, code=not written.stock)
            if result["max_difference"] > HF_TOLERANCE:
                raise GhostifyError(f"the exported model differs from ghostify's by {result['max_difference']:.2e} "
                                    f"(more than {HF_TOLERANCE:g}); please report this model")
        else:
            written = write_graph(net, tmp, target, pooling=pooling, quantize=quantize, keep_fp32=kept_modules,
                                  calibration=calibration)
            config = copy.deepcopy(net.config)
            drop_auto_map(config)
            config.save_pretrained(tmp)  # labels and sizes, for `ghostify eval` and users
            copy_tokenizer(model, tmp)
            facts.graph_files, facts.graph_inputs, facts.graph_outputs = (tuple(written.files), tuple(written.inputs),
                                                                          tuple(written.outputs))
            facts.graph_fp32_modules = keep_fp32 if quantize == INT8 else ()
            facts.graph_differences = {graph: difference for graph, difference in (
                (target.graph, written.max_difference), (target.int8_graph, written.int8_difference))
                if graph in written.files and difference is not None}
            check_card(write_card(tmp, facts))
            result.update(runtime=target.name, inputs=written.inputs, outputs=written.outputs,
                          files=[f for graph in written.files for f in target.files(graph)],
                          max_difference=written.max_difference, int8_difference=written.int8_difference)
            if written.reduced_precision is not None:  # what ships on this CPU: the runtime's default arithmetic
                result["precision"] = {"name": written.reduced_precision, "difference": written.reduced_difference}
            if calibrated:
                result["calibration_samples"] = len(calibration)
            if keep_fp32:
                result["kept_fp32"] = written.kept_fp32
    if hub is not None:  # the finished export, as one commit: the local directory stays complete either way
        result["pushed"] = push_folder(out, hub, message=f"ghostify export --format {format} of {Path(str(model)).name}")
    return result


def _int8_runtimes() -> list[Runtime]:
    return [r for r in graph_runtimes() if r.int8_graph is not None]


def _calibration_rows(model: str | os.PathLike, data: DataSettings, task_settings: TaskSettings, samples: int):
    """A seeded random subset of ``samples`` training examples of ``data``'s task, encoded as training encodes
    them (with ``task_settings``' columns and windows); returns a function of the graph's input names that makes
    them one input batch each (numpy), unpadded, as a deployment feeds them. No task named: the one the checkpoint's history names."""
    if data.task is None and data.text_columns is None and not any(task_settings.columns().values()):
        found = recorded_task(model)
        if found is None:
            raise GhostifyError("--quantize int8 of this runtime calibrates on training examples of the model's task, "
                                f"and {model}'s history names none: pass --task (and --dataset), or a dataset's columns (--text-columns, "
                                "--tokens-column, --question-column, ...)")
        task, dataset = found
        data = replace(data, task=task, dataset=data.dataset if data.dataset != DEFAULT_DATASET else dataset)
        err.print(f"export: calibrating on task {task} of {data.dataset}, from the history of {model} (pass --task to "
                  "choose another)")
    kind = task_kind(data, task_settings)
    dataset = dataset_for(kind.preset, data.dataset)
    check_max_length(data.max_length, model)
    kind.for_model(load_config(model))
    rows = load_split(dataset, kind.preset, "train", max_samples=samples, require_labels=False)
    kind.with_data(rows)
    tokenizer = load_tokenizer(model)
    encoded = kind.encode(rows, tokenizer)
    collate = kind.collator(tokenizer)

    def batches(inputs: list[str]) -> list[dict[str, Any]]:
        made = []
        for i in range(min(samples, len(encoded))):
            batch = kind.inputs(collate([encoded[i]]))
            batch.setdefault("token_type_ids", 0 * batch["input_ids"])  # one segment, where the tokenizer gives none
            made.append({name: batch[name].numpy() for name in inputs})
        return made

    return batches


_CHECK = WITHOUT_GHOSTIFY + QUIET_TRANSFORMERS + textwrap.dedent("""
    import json, tempfile
    import torch

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

    from huggingface_hub import ModelCard  # the card parses as the hub reads it
    card = ModelCard.load(directory + "/README.md").data.to_dict()
    if not card.get("library_name") or "ghostify" not in (card.get("tags") or []):
        raise SystemExit(f"README.md: the model card lacks its metadata: {card}")
    model = auto_class.from_pretrained(directory, trust_remote_code=trust).eval()
    worst = worst_difference(model)
    with tempfile.TemporaryDirectory() as again:  # what the loaded model saves loads the same way
        model.save_pretrained(again)
        worst = max(worst, worst_difference(auto_class.from_pretrained(again, trust_remote_code=trust).eval()))
    print(json.dumps({"max_difference": worst, "class": type(model).__name__}))
""")


#: what the check's process (or torch) says when the temporary directory's disk is full
_NO_SPACE = ("No space left on device", "Errno 28", "Disk quota exceeded", "Errno 122", "StorageFull",
             "file write failed")


def _no_space(where: str) -> GhostifyError:
    return GhostifyError(f"the temporary directory {where} ran out of space during the export's check without "
                         "ghostify (it holds a copy of the model's code and a re-saved model): free space there, or "
                         "point TMPDIR at a disk with room, e.g. TMPDIR=/path/with/room ghostify export ...")


def check_arguments(*, format: str = ExportDefaults.format, quantize: str | None = None,
                    keep_fp32: tuple[str, ...] | None = None,
                    calibration_samples: int = ExportDefaults.calibration_samples, **_: object) -> None:
    """What :func:`export` refuses of its arguments before reading anything."""
    target = runtime(format) if format != "hf" else None  # one line for a format no runtime writes
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise GhostifyError(f"--quantize {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
    if quantize is not None and (target is None or target.int8_graph is None):
        formats = " or ".join(f"--format {r.name}" for r in _int8_runtimes())
        raise GhostifyError(f"--quantize {quantize} quantises an exported graph; add {formats}")
    keep_fp32 = tuple(keep_fp32 or ())
    if any(not str(name).strip() for name in keep_fp32):  # `--keep-fp32 ''` is a mistake, not "none"
        raise GhostifyError(f"--keep-fp32 {','.join(keep_fp32)!r} names an empty module; give comma-separated module "
                            "names or patterns (e.g. task-head, '*.output.dense'), or leave "
                            "--keep-fp32 out")
    if keep_fp32 and quantize != INT8:
        raise GhostifyError(f"--keep-fp32 {','.join(keep_fp32)} keeps modules out of int8 quantisation; add "
                            "--format onnx --quantize int8, or drop it")
    calibrated = target is not None and quantize == INT8 and target.calibrated
    if calibrated and (isinstance(calibration_samples, bool) or not isinstance(calibration_samples, int)
                       or calibration_samples < 1):
        raise GhostifyError(f"--calibration-samples {calibration_samples!r} must be a whole number of at least 1")


checks_arguments(export, check_arguments)


@torch.no_grad()
def check_hf(net: torch.nn.Module, directory: Path, auto_name: str, *, code: bool) -> float:
    """Load ``directory`` in a fresh Python where ghostify cannot be imported, through the Auto
    class ``auto_name``, save it with ``save_pretrained`` and load that too; return the largest
    difference of either from ``net`` on padded batches."""
    inputs = input_names(net)
    batches = [example_batch(net.config, inputs, 3, 11, seed=1), example_batch(net.config, inputs, 2, 6, seed=2, padded=False)]
    outputs = [tuple(t for t in net(**b).to_tuple() if isinstance(t, torch.Tensor)) for b in batches]
    where = tempfile.gettempdir()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            io_path = Path(scratch) / "io.pt"
            torch.save({"batches": batches, "outputs": outputs}, io_path)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
            env.update(HF_MODULES_CACHE=str(Path(scratch) / "modules"), HF_HUB_OFFLINE="1",
                       TRANSFORMERS_VERBOSITY="error")
            # the check runs in the scratch directory: it gets the export's absolute path
            arguments = [str(directory.absolute()), auto_name, str(io_path), "1" if code else "0"]
            result = subprocess.run([sys.executable, "-c", _CHECK, *arguments], capture_output=True, text=True,
                                    cwd=scratch, env=env, timeout=600)
    except (OSError, RuntimeError) as exc:
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if full or any(p in str(exc) for p in _NO_SPACE):
            raise _no_space(where) from exc
        raise
    if result.returncode != 0:
        if any(p in result.stderr for p in _NO_SPACE):
            raise _no_space(where)
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GhostifyError(f"the exported model does not load without ghostify: {last}; please report this model")
    return float(json.loads(result.stdout.strip().splitlines()[-1])["max_difference"])


__all__ = ["QUANTIZATIONS", "check_hf", "export"]
