"""The ``README.md`` of every checkpoint and export: a Hugging Face model card.

YAML front matter (``base_model``, ``library_name``, ``tags``, ``pipeline_tag``, ``datasets`` and
``model-index`` with the metrics measured during training) that the hub and ``huggingface_hub``
read, then what a person wants to know: how the model was compressed (its record's history), its
size, how it scored, and how to load it. Everything comes from the record, the config, the sizes
measured on the model and ``training.json``; nothing is typed in by hand, so the card cannot
drift from the checkpoint it describes.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from .architectures import usable_positions
from .errors import GhostifyError
from .files import write_text_atomically
from .flops import measure
from .heads import architectures
from .methods import methods
from .record import PATH_ARGUMENTS, GhostifyRecord  # a local one is shown by its name, never its path
from .runtimes import INT8, Usage, runtime
from .units import human

CARD_NAME = "README.md"
TRAINING_NAME = "training.json"
#: FLOPs are counted at this many tokens, or all the model reads when that is fewer
CARD_SEQ_LEN = 128

#: the pipeline a head serves, by the suffix of its transformers class
PIPELINES = (("ForSequenceClassification", "text-classification"), ("ForTokenClassification", "token-classification"),
             ("ForQuestionAnswering", "question-answering"), ("ForMaskedLM", "fill-mask"))
#: the Auto class that loads each head (the bare encoder: AutoModel)
AUTO_NAMES = {"ForSequenceClassification": "AutoModelForSequenceClassification",
              "ForTokenClassification": "AutoModelForTokenClassification",
              "ForQuestionAnswering": "AutoModelForQuestionAnswering", "ForMaskedLM": "AutoModelForMaskedLM"}
#: the tag of each command in the history
COMMAND_TAGS = {"prune": "pruned", "distill": "distillation"}
#: history arguments not worth a card line (the input is named separately; hashes and times are noise)
QUIET_ARGUMENTS = {"model", "student", "sha256"}
#: the temporary sibling that ``files.atomic_directory`` writes into: ``.NAME.tmp-`` and 8 random characters
_TEMPORARY = re.compile(r"^\.(.+)\.tmp-[^.]+$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass
class CardFacts:
    """What a card says, gathered by whoever writes the model (checkpoint, hf or a runtime's graph export)."""

    name: str  # how the snippets name the model: the directory's name, or the hub repository
    config: Any  # the model's transformers config (its head, family)
    record: GhostifyRecord
    size: dict[str, int] | None = None  # params, encoder_params, embedding_params, flops, seq_len
    training: dict[str, Any] | None = None  # training.json of the checkpoint (or of the one exported)
    output: str = "checkpoint"  # checkpoint, hf or the runtime of a graph export (``ghostify.runtimes``: onnx, ...)
    code: bool = False  # hf export: loads through modeling_ghostify (trust_remote_code)
    sentence_transformers: bool = False  # the directory has a sentence-transformers layout
    graph_files: tuple[str, ...] = ()
    graph_inputs: tuple[str, ...] = ()
    graph_outputs: tuple[str, ...] = ()
    graph_fp32_modules: tuple[str, ...] = ()  # export --keep-fp32: modules the int8 graph keeps fp32
    #: each graph's largest difference from the PyTorch model's outputs (what the export measured on the graphs)
    graph_differences: dict[str, float] | None = None

    @property
    def graphs(self) -> bool:
        """Whether it describes a runtime's graphs (not weights that transformers loads)."""
        return self.output not in ("checkpoint", "hf")
    pushed: bool = False  # ``name`` is the hub repository it is pushed to


# ----------------------------------------------------------------------------------------------
# the facts
# ----------------------------------------------------------------------------------------------
def model_size(model: nn.Module) -> dict[str, int]:
    """Parameters and FLOPs (batch 1, ``CARD_SEQ_LEN`` tokens or fewer) of ``model``, as in ``ghostify info``."""
    seq_len = min(CARD_SEQ_LEN, usable_positions(model.config))
    return {**measure(model, seq_len=seq_len).as_dict(), "seq_len": seq_len}


def read_training(directory: Path) -> dict[str, Any] | None:
    """``training.json`` of a trained checkpoint (its evaluations), or None. Every reader of it
    comes here: a damaged training.json costs the card (and a recipe's report) its metrics, said in
    one warning, not the command."""
    path = directory / TRAINING_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # a directory, unreadable, not UTF-8, not JSON
        text = str(exc).strip()
        fault = f"it cannot be read as JSON: {text.splitlines()[0] if text else type(exc).__name__}"
    else:
        fault = _training_fault(data)
    if fault is None:
        return data
    warnings.warn(f"{path} is damaged ({fault}): the metrics it holds are left out of the model card", UserWarning,
                  stacklevel=2)
    return None


def _training_fault(data: Any) -> str | None:
    """What is wrong with ``training.json``'s content (the loop's layout), or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    evaluations = data.get("evaluations")
    if evaluations is not None and not isinstance(evaluations, list):
        return f"evaluations is a {type(evaluations).__name__}, not a list"
    for number, evaluation in enumerate(evaluations or [], 1):
        values = evaluation.get("eval") if isinstance(evaluation, dict) else None
        if not isinstance(values, dict):
            return f"evaluation {number} has no mapping of metrics under eval"
        if not _whole(evaluation.get("step")):
            return f"evaluation {number} has step {evaluation.get('step')!r}, not a step number"
        odd = next((k for k, v in values.items() if v is not None and not _number(v)), None)
        if odd is not None:
            return f"metric {odd} of evaluation {number} is {values[odd]!r}, not a number"
    if not _whole(data.get("best_step")):
        return f"best_step is {data['best_step']!r}, not a step number"
    baseline = data.get("constant_baseline")
    if baseline is not None and not (isinstance(baseline, dict) and isinstance(baseline.get("metric"), str)
                                     and all(_number(baseline.get(k)) for k in ("value", "best"))
                                     and isinstance(baseline.get("beats"), bool)):
        return "constant_baseline is not a mapping of its metric, value, best and beats"
    rates = data.get("learning_rates")
    if rates is not None and not (isinstance(rates, dict) and all(_number(v) for v in rates.values())):
        return "learning_rates is not a mapping of numbers"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    """None or a step number."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def display_name(directory: Path) -> str:
    """The name a directory will have: an atomic write's temporary sibling is renamed to it."""
    match = _TEMPORARY.match(directory.name)
    return match.group(1) if match else directory.name


def hub_id(value: Any, kind: str = "models") -> str | None:
    """``value`` as a hub id: itself when it is one, the repository of a hub cache snapshot path
    (``.../models--org--name/snapshots/<rev>``); None for any other local path."""
    if not isinstance(value, str) or not value:
        return None
    for part in Path(value).parts:
        if part.startswith(f"{kind}--"):
            return "/".join(part.split("--")[1:])
    if value.startswith((".", "/", "~")) or not _HUB_ID.match(value):  # the pattern allows one "/"
        return None
    return value


def _first_model(record: GhostifyRecord) -> str | None:
    for entry in record.history:
        arguments = (entry.get("arguments") or {}) if isinstance(entry, dict) else {}
        for key in ("model", "student"):
            if arguments.get(key):
                return str(arguments[key])
    return None


def _shown(key: str, value: Any) -> str:
    """A history argument for people: a local path by its name (a card may be published)."""
    if key in PATH_ARGUMENTS and isinstance(value, str):
        return hub_id(value) or hub_id(value, "datasets") or Path(value).name or value
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def head_suffix(config: Any) -> str | None:
    return next((suffix for suffix, _ in PIPELINES if any(a.endswith(suffix) for a in architectures(config))), None)


def pipeline_tag(facts: CardFacts) -> str:
    suffix = head_suffix(facts.config)
    if suffix is not None:
        return dict(PIPELINES)[suffix]
    return "sentence-similarity" if facts.sentence_transformers else "feature-extraction"


def tags(facts: CardFacts) -> list[str]:
    found = ["ghostify"]
    commands = {str(e.get("command")) for e in facts.record.history if isinstance(e, dict)}
    found += [tag for command, tag in COMMAND_TAGS.items() if command in commands]
    found += [m.tag for m in methods() if m.tag and m.present(facts.record)]
    if facts.sentence_transformers:
        found.append("sentence-transformers")
    if facts.graphs:
        found.append(facts.output)
    if any(INT8 in f for f in facts.graph_files):
        found.append(INT8)
    return found


def datasets(record: GhostifyRecord) -> list[str]:
    found: list[str] = []
    for entry in record.history:
        value = ((entry.get("arguments") or {}) if isinstance(entry, dict) else {}).get("dataset")
        name = hub_id(value, "datasets")
        if name and name not in found:
            found.append(name)
    return found


def best_evaluation(training: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evaluation of the saved model: the best one when training kept the best, else the last."""
    evaluations = [e for e in (training or {}).get("evaluations") or [] if isinstance(e, dict)]
    if not evaluations:
        return None
    best = training.get("best_step")
    return next((e for e in evaluations if e.get("step") == best), evaluations[-1])


def metrics(training: dict[str, Any] | None) -> dict[str, float]:
    """The scores of the saved model's evaluation (not its example count)."""
    evaluation = best_evaluation(training) or {}
    values = evaluation.get("eval") or {}
    return {str(k): float(v) for k, v in values.items() if k != "samples"
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _training_run(record: GhostifyRecord) -> dict[str, Any]:
    """The arguments of the last training step of the history (its task and dataset)."""
    for entry in reversed(record.history):
        if isinstance(entry, dict) and entry.get("command") in ("finetune", "distill"):
            return entry.get("arguments") or {}
    return {}


def card_data(facts: CardFacts):
    """The front matter as ``huggingface_hub.ModelCardData``."""
    from huggingface_hub import EvalResult, ModelCardData  # deferred: transformers brings it, slowly

    base = _first_model(facts.record)
    library = (runtime(facts.output).library if facts.graphs else
               "sentence-transformers" if facts.sentence_transformers else "transformers")
    # the metrics training measured on the PyTorch model: a graph export's graphs were not scored (int8 changes
    # them), so its structured results would credit the graphs with numbers measured on another model
    scores = metrics(facts.training) if not facts.graphs else {}
    run = _training_run(facts.record)
    dataset = _shown("dataset", run["dataset"]) if run.get("dataset") else "unknown"
    task = str(run.get("task") or "validation")
    results = [EvalResult(task_type=pipeline_tag(facts), dataset_type=dataset, dataset_name=task, metric_type=name,
                          metric_value=value) for name, value in scores.items()]
    return ModelCardData(
        base_model=hub_id(base) if base else None,
        library_name=library,
        tags=tags(facts),
        pipeline_tag=pipeline_tag(facts),
        datasets=datasets(facts.record) or None,
        eval_results=results or None,
        model_name=facts.name if results else None,
    )


# ----------------------------------------------------------------------------------------------
# the text
# ----------------------------------------------------------------------------------------------
def render(facts: CardFacts) -> str:
    data = card_data(facts)
    sections = [_title(facts), _history(facts), _size(facts), _evaluation(facts), _usage(facts)]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(s for s in sections if s) + "\n"


def _title(facts: CardFacts) -> str:
    base = _first_model(facts.record)
    origin = f" from `{_shown('model', base)}`" if base else ""
    what = ({"checkpoint": "a ghostify checkpoint", "hf": "a Transformers export"}.get(facts.output)
            or f"an export for {runtime(facts.output).title}")
    return (f"# {facts.name}\n\nA compressed `{facts.config.model_type}` model ({pipeline_tag(facts)}), made with "
            f"ghostify{origin}: {what}.")


def _history(facts: CardFacts) -> str:
    lines = []
    for step, entry in enumerate(facts.record.history, 1):
        if not isinstance(entry, dict):
            continue
        arguments = entry.get("arguments") or {}
        source = next((arguments[k] for k in ("model", "student") if arguments.get(k)), None)
        of = f" of `{_shown('model', source)}`" if source else ""
        shown = ", ".join(f"{k}={_shown(k, v)}" for k, v in arguments.items()
                          if k not in QUIET_ARGUMENTS and v not in (None, False, "", [], {}))
        lines.append(f"{step}. `ghostify {entry.get('command')}`{of}" + (f": {shown}" if shown else ""))
    return "## Compression history\n\n" + ("\n".join(lines) if lines else "No ghostify step changed this model.")


def _size(facts: CardFacts) -> str:
    record = facts.record
    rows = []
    if facts.size:
        size = facts.size
        rows += [("parameters", f"{human(size['params'])} ({human(size['encoder_params'])} in the encoder layers, "
                                f"{human(size['embedding_params'])} in the embeddings)"),
                 (f"FLOPs (1 sequence of {size['seq_len']} tokens)", human(size["flops"]))]
    rows += [("attention heads per layer", ", ".join(map(str, record.heads_per_layer))),
             ("FFN width per layer", ", ".join(map(str, record.ffn)))]
    # each structural method's own rows (ghostify info's), from its record entry
    info = {"methods": record.methods, **record.methods}
    rows += [row for m in methods() if m.tracked and m.present(record) for row in m.describe(info)]
    table = "\n".join(f"| {what} | {value} |" for what, value in rows)
    return f"## Size\n\n| | |\n|---|---|\n{table}"


def _evaluation(facts: CardFacts) -> str:
    scores = metrics(facts.training)
    if facts.graphs:
        return _graph_evaluation(facts, scores)
    if not scores:
        return ""
    return (f"## Evaluation\n\nMeasured by ghostify during training on {_where_scored(facts)}.\n\n"
            f"{_metrics_table(scores)}")


def _where_scored(facts: CardFacts) -> str:
    """"the validation split of `glue` (872 examples) (task sst2), at step 200": where training scored the model."""
    evaluation = best_evaluation(facts.training) or {}
    samples = (evaluation.get("eval") or {}).get("samples")
    run = _training_run(facts.record)
    where = "the validation split" + (f" of `{_shown('dataset', run['dataset'])}`" if run.get("dataset") else "")
    where += f" ({samples} examples)" if isinstance(samples, int) else ""
    task = f" (task {run['task']})" if run.get("task") else ""
    return f"{where}{task}, at step {evaluation.get('step')}"


def _metrics_table(scores: dict[str, float]) -> str:
    return "| metric | value |\n|---|---|\n" + "\n".join(f"| {name} | {value:.4f} |" for name, value in scores.items())


def _graph_evaluation(facts: CardFacts, scores: dict[str, float]) -> str:
    """What was measured on the graphs (their outputs against the PyTorch model's), and the PyTorch model's
    scores as such: the graphs themselves were not scored on the task, and int8 changes what they predict."""
    differences = facts.graph_differences or {}
    if not scores and not differences:
        return ""
    parts = ["## Evaluation"]
    if differences:
        listed = ", ".join(f"`{graph}` {value:.1e}" for graph, value in differences.items())
        int8 = (" (int8: its quantisation error, which can change predictions)"
                if any(INT8 in g for g in differences) else "")
        parts.append("Measured on the graphs when they were exported: their outputs against the PyTorch model's on "
                     f"batches of several sizes, lengths and padding; the largest difference: {listed}{int8}.")
    if scores:
        run = _training_run(facts.record)
        graphs = facts.graph_files or (runtime(facts.output).graph,)
        graph = next((g for g in graphs if INT8 in g), graphs[0])
        command = f"`ghostify eval {facts.name}/{graph}" + (
            f" --task {run['task']}`" if run.get("task") not in (None, "custom") else
            "` with the data options it was trained with (`--dataset`, `--text-columns`, `--label-column`)")
        parts.append(f"Not measured on these graphs: the PyTorch model they were exported from scored this during "
                     f"training on {_where_scored(facts)}. To score a graph on the task: {command}.")
        parts.append(_metrics_table(scores))
    return "\n\n".join(parts)


def _usage(facts: CardFacts) -> str:
    name = facts.name
    auto = AUTO_NAMES.get(head_suffix(facts.config) or "", "AutoModel")
    if facts.output == "checkpoint":
        return ("## Usage\n\nWith ghostify (`pip install ghostify`), which rebuilds the recorded structure before "
                f"loading the weights strictly:\n\n```python\nimport ghostify\nfrom transformers import AutoTokenizer\n\n"
                f'model = ghostify.load_model("{name}")\ntokenizer = AutoTokenizer.from_pretrained("{name}")\n```\n\n'
                f"Without ghostify: `ghostify export {name} -o {name}-hf` writes a copy that loads with "
                f"`{auto}.from_pretrained(..., trust_remote_code=True)`, and `--format onnx` one for ONNX Runtime.")
    if facts.graphs:
        return _graph_usage(facts)
    trust = ", trust_remote_code=True" if facts.code else ""
    why = ("`trust_remote_code=True` runs the structure code shipped beside the weights (`modeling_ghostify.py` and "
           "the `ghostify_*.py` files it imports; they need torch and transformers only, not ghostify)."
           if facts.code else "A stock checkpoint: transformers' own classes load it, no custom code.")
    text = (f"## Usage\n\nWithout ghostify, with Transformers:\n\n```python\n"
            f"from transformers import {auto}, AutoTokenizer\n\n"
            f'model = {auto}.from_pretrained("{name}"{trust})\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{name}")\n```\n\n{why}')
    if facts.sentence_transformers:
        text += (f"\n\nWith sentence-transformers (pooling and normalisation as the original model):\n\n```python\n"
                 f"from sentence_transformers import SentenceTransformer\n\n"
                 f'model = SentenceTransformer("{name}"{trust})\n'
                 'embeddings = model.encode(["A sentence to embed."])\n```')
    return text


def _graph_usage(facts: CardFacts) -> str:
    """The runtime's own usage text, and ghostify's commands that run the graph."""
    graphs = runtime(facts.output)
    text = graphs.usage(Usage(name=facts.name, files=facts.graph_files, inputs=facts.graph_inputs,
                              outputs=facts.graph_outputs, pushed=facts.pushed, fp32_modules=facts.graph_fp32_modules))
    graph = facts.graph_files[0] if facts.graph_files else graphs.graph
    local = "" if facts.pushed else (f"\n\nWith ghostify: `ghostify eval {facts.name}/{graph} --task ...` and "
                                     f"`ghostify bench {facts.name}/{graph}` run the graph.")
    return f"## Usage\n\n{text}{local}"


# ----------------------------------------------------------------------------------------------
# writing and reading back
# ----------------------------------------------------------------------------------------------
def write_card(directory: Path, facts: CardFacts) -> Path:
    """Write ``directory/README.md`` in one rename (a hard-linked copy elsewhere keeps its own)."""
    path = directory / CARD_NAME
    write_text_atomically(path, render(facts))
    return path


def check_card(path: Path) -> dict[str, Any]:
    """Parse ``path`` as ``huggingface_hub`` does and return its metadata; a card it cannot read
    is ghostify's fault, said in one line."""
    from huggingface_hub import ModelCard  # deferred

    try:
        card = ModelCard.load(path)
        data = card.data.to_dict()
    except Exception as exc:  # huggingface_hub's parsing errors share no class
        raise GhostifyError(f"the model card {path} that ghostify wrote does not parse ({type(exc).__name__}: "
                            f"{str(exc).strip()[:200]}); please report this model") from exc
    if not data.get("library_name") or "ghostify" not in (data.get("tags") or []):
        raise GhostifyError(f"the model card {path} lacks its metadata; please report this model")
    return data


def checkpoint_facts(model: nn.Module, directory: Path, record: GhostifyRecord) -> CardFacts:
    """The facts of a ghostify checkpoint in ``directory`` (``model``: loaded back from it)."""
    return CardFacts(name=display_name(directory), config=model.config, record=record, size=model_size(model),
                     training=read_training(directory))
