"""Every checkpoint and export writes a README.md that is a Hugging Face model card: its front matter
parses with huggingface_hub (library, tags, pipeline, base model, datasets, measured metrics), its
body says how the model was made, how big it is and how to load it; the card never gets in the
way of strict loading, the random state or a published card's privacy (no local paths)."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import BertConfig

from ghostify import steps
from ghostify.card import CardFacts, card_data, hub_id, render
from ghostify.checkpoint import load_model, model_record, save_checkpoint
from ghostify.errors import GhostifyError
from ghostify.record import GhostifyRecord
from ghostify.testing import tiny_batch, tiny_checkpoint, tiny_sentence_transformer, write_toy_dataset

pytestmark = pytest.mark.filterwarnings("ignore")

TOY = {"text_columns": ("sentence",), "label_column": "label", "max_length": 32}


def _card(directory: Path) -> tuple[dict, str]:
    card = ModelCard.load(directory / "README.md")
    return card.data.to_dict(), card.text


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A plain prune output, its hf, ONNX (int8) exports, and a sentence-transformers export (the hf exports without
    their check in a fresh Python: the cards are the subject here, the check reading one back is tested below)."""
    root = tmp_path_factory.mktemp("cards")
    tiny_checkpoint(root / "m")
    steps.prune(root / "m", root / "pruned", width=0.5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importlib.import_module("ghostify.steps.export"), "check_hf", lambda *args, **kwargs: 0.0)
        steps.export(root / "pruned", root / "hf")
        steps.export(root / "pruned", root / "onnx", format="onnx", quantize="int8")
        tiny_sentence_transformer(root / "st")
        steps.prune(root / "st", root / "st-pruned", width=0.5)
        steps.export(root / "st-pruned", root / "st-hf")
    return root


def test_a_prune_output_has_a_card(made):
    data, text = _card(made / "pruned")
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-classification"
    assert data["tags"] == ["ghostify", "pruned"]
    assert "base_model" not in data and "model-index" not in data  # a local origin; nothing measured
    assert text.lstrip().startswith("# pruned\n")  # the directory's name, not the temporary one it was written as
    assert "1. `ghostify prune` of `m`: " in text and "heads_width=1/2" in text
    assert "| attention heads per layer | 2, 2 |" in text and "FLOPs (1 sequence of 128 tokens)" in text
    assert 'ghostify.load_model("pruned")' in text
    assert str(made) not in text  # local paths by their name only: a card may be published


def test_the_card_does_not_disturb_strict_loading_or_the_random_state(tmp_path):
    tiny_checkpoint(tmp_path / "m")
    model = load_model(tmp_path / "m")
    torch.manual_seed(3)
    before = torch.get_rng_state()
    save_checkpoint(model, tmp_path / "saved", model_record(model))
    assert torch.equal(torch.get_rng_state(), before)  # the model built to measure it drew from a fork
    assert (tmp_path / "saved" / "README.md").is_file()
    again = load_model(tmp_path / "saved")  # README.md is no unexpected file
    batch = tiny_batch()
    assert torch.equal(again(**batch).logits, model(**batch).logits)


def test_a_ghost_distilled_checkpoint_has_its_measured_metrics(tmp_path):
    tiny_checkpoint(tmp_path / "teacher")
    toy = write_toy_dataset(tmp_path / "toy", train=32, validation=16)
    steps.attach_ghost(tmp_path / "teacher", tmp_path / "ghost", features=2)
    steps.distill(tmp_path / "teacher", tmp_path / "ghost", tmp_path / "distilled", dataset=str(toy), **TOY,
                  logit_weight=1.0, epochs=2, batch_size=16, max_samples=32)
    training = json.loads((tmp_path / "distilled" / "training.json").read_text())
    best = next(e for e in training["evaluations"] if e["step"] == training["best_step"])
    data, text = _card(tmp_path / "distilled")
    assert data["tags"] == ["ghostify", "distillation", "ghost"]
    (index,) = data["model-index"]
    assert index["name"] == "distilled"  # the output's name, not the training's `best` copy
    (result,) = index["results"]
    assert result["task"]["type"] == "text-classification" and result["dataset"]["name"] == "custom"
    assert {m["type"]: m["value"] for m in result["metrics"]} == {"accuracy": best["eval"]["accuracy"]}
    assert "1. `ghostify attach-ghost` of `teacher`" in text and "2. `ghostify distill` of `ghost`" in text
    assert "| ghost | dwconv k=3 softmax relu F=2 shared at o,ffn2; " in text and f"at step {best['step']}" in text


def test_front_matter_from_the_history():
    """Hub ids (and hub cache snapshots) become base_model and datasets; local paths do not, and
    never show in the card."""
    history = [
        {"command": "importance", "arguments": {"model": "sentence-transformers/all-MiniLM-L6-v2",
                                                "dataset": "nyu-mll/glue", "task": "sst2", "sha256": "ab" * 32}},
        {"command": "prune", "arguments": {"model": "/home/someone/private/scored", "heads_width": "1/2"}},
        {"command": "finetune", "arguments": {"model": "/home/someone/private/pruned", "task": "sst2",
                                              "dataset": "/home/someone/cache/datasets--org--reviews/snapshots/x1"}},
        {"command": "finetune", "arguments": {"model": "/home/someone/private/tuned", "task": "sst2",
                                              "dataset": "/home/someone/private/data"}},
    ]
    record = GhostifyRecord(heads=[[0, 1], [2, 3]], ffn=[10, 12], history=history)
    config = BertConfig(architectures=["BertForSequenceClassification"])
    training = {"best_step": 4, "evaluations": [{"step": 2, "eval": {"accuracy": 0.5, "samples": 8}},
                                                {"step": 4, "eval": {"accuracy": 0.75, "samples": 8}}]}
    facts = CardFacts(name="org/tuned", config=config, record=record, training=training, output="hf", code=True,
                      pushed=True)
    data = ModelCard(render(facts)).data.to_dict()
    assert data["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert data["datasets"] == ["nyu-mll/glue", "org/reviews"]
    (result,) = data["model-index"][0]["results"]
    assert result["metrics"] == [{"type": "accuracy", "value": 0.75}]  # the best evaluation, not the count
    assert result["dataset"] == {"name": "sst2", "type": "data"}
    text = render(facts)
    assert "/home/someone" not in text and "abab" not in text
    assert 'from_pretrained("org/tuned", trust_remote_code=True)' in text
    assert card_data(facts).library_name == "transformers"
    assert hub_id("bert-base-uncased") == "bert-base-uncased" and hub_id("./local") is None and hub_id("a/b/c") is None


def test_an_hf_export_card(made):
    data, text = _card(made / "hf")
    assert (data["library_name"], data["pipeline_tag"], data["tags"]) == ("transformers", "text-classification",
                                                                          ["ghostify", "pruned"])
    assert 'AutoModelForSequenceClassification.from_pretrained("hf", trust_remote_code=True)' in text
    assert "a Transformers export" in text


def test_an_onnx_export_card(made):
    data, text = _card(made / "onnx")
    assert (data["library_name"], data["pipeline_tag"]) == ("onnx", "text-classification")
    assert data["tags"] == ["ghostify", "pruned", "onnx", "int8"]
    assert 'onnxruntime.InferenceSession("onnx/model.onnx")' in text and "`model_int8.onnx` (int8" in text
    assert '"input_ids": batch["input_ids"]' in text and "outputs `logits`" in text


def test_a_sentence_transformers_export_card(made):
    data, text = _card(made / "st-hf")
    assert (data["library_name"], data["pipeline_tag"]) == ("sentence-transformers", "sentence-similarity")
    assert "sentence-transformers" in data["tags"]
    assert 'SentenceTransformer("st-hf", trust_remote_code=True)' in text
    assert (made / "st-hf" / "modules.json").is_file()


def test_the_check_without_ghostify_reads_the_card_back(made, tmp_path, monkeypatch):
    """A card huggingface_hub cannot parse fails the export (in the check's own process)."""
    export_step = importlib.import_module("ghostify.steps.export")  # the module: steps.export is the function

    def broken(directory: Path, facts: CardFacts) -> Path:
        (directory / "README.md").write_text("---\nlibrary_name: [unclosed\n---\n# broken\n")
        return directory / "README.md"

    monkeypatch.setattr(export_step, "write_card", broken)
    with pytest.raises(GhostifyError, match="does not load without ghostify"):
        steps.export(made / "pruned", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_an_export_of_a_trained_checkpoint_carries_its_metrics(made, tmp_path, without_load_check):
    """The export's card reads the checkpoint's training.json (an input: read only). An hf export is the same
    model (checked to 1e-4; the check is test_export's): its card carries the metrics. The ONNX graphs were not scored on the task (int8
    changes what they predict): their card says so, lists what was measured on them, and claims no results."""
    source = tmp_path / "trained"
    shutil.copytree(made / "pruned", source)
    training = {"best_step": 3, "evaluations": [{"step": 3, "eval": {"accuracy": 0.625, "samples": 16}}]}
    (source / "training.json").write_text(json.dumps(training))
    steps.export(source, tmp_path / "hf")
    data, text = _card(tmp_path / "hf")
    assert data["model-index"][0]["results"][0]["metrics"] == [{"type": "accuracy", "value": 0.625}]
    result = steps.export(source, tmp_path / "onnx", format="onnx", quantize="int8")
    data, text = _card(tmp_path / "onnx")
    assert "model-index" not in data  # the hub would show the PyTorch model's accuracy as the graphs'
    assert "Not measured on these graphs: the PyTorch model they were exported from scored this" in text
    assert "| accuracy | 0.6250 |" in text and "To score a graph on the task: `ghostify eval onnx/model_int8.onnx" in text
    assert f"`model_int8.onnx` {result['int8_difference']:.1e}" in text and "quantisation error" in text
    assert f"`model.onnx` {result['max_difference']:.1e}" in text
