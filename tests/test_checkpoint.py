"""The checkpoint format: strict loading, atomic writes, untouched inputs, loading with a head."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from ghostify import load_model, save_checkpoint
from ghostify.architectures import get_adapter
from ghostify.errors import CheckpointError, GhostifyError, UnsupportedModelError
from ghostify.files import atomic_directory
from ghostify.methods.pruning import magnitude_importance
from ghostify.methods.pruning.apply import dense_record, prune
from ghostify.record import GhostifyRecord
from ghostify.testing import tiny_batch, tiny_model


def _pruned(tmp_path: Path, family: str = "bert", head: str = "base") -> Path:
    model = tiny_model(family, head)
    adapter = get_adapter(model.config)
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter),
                      heads_width=Fraction(1, 2), ffn_width=Fraction(1, 2))
    return save_checkpoint(model, tmp_path / "pruned", record)


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_layout_and_record(tmp_path):
    path = _pruned(tmp_path)
    assert {"config.json", "model.safetensors"} <= {p.name for p in path.iterdir()}
    record = json.loads((path / "config.json").read_text())["ghostify"]
    assert [len(h) for h in record["heads"]] == [2, 2] and record["ffn"] == [19, 19]
    assert record["format"] == 2 and record["methods"] == {}  # pruning's entry is the widths themselves


def test_plain_transformers_directory_loads_with_a_dense_record(tmp_path):
    model = tiny_model("roberta", "masked-lm")
    model.save_pretrained(tmp_path / "hf")
    loaded = load_model(tmp_path / "hf")
    batch = tiny_batch()
    assert torch.equal(loaded(**batch).logits, model(**batch).logits)


def test_bare_encoder_loads_into_a_task_head_with_a_warning(tmp_path):
    path = _pruned(tmp_path, head="base")
    with pytest.warns(UserWarning, match="freshly initialised"):
        clf = load_model(path, head="sequence-classification", num_labels=3)
    assert clf.config.num_labels == 3
    encoder = load_model(path)
    batch = tiny_batch()
    assert torch.equal(clf.base_model(**batch).last_hidden_state, encoder(**batch).last_hidden_state)


def test_task_model_loads_as_bare_encoder(tmp_path):
    path = _pruned(tmp_path, head="sequence-classification")
    full = load_model(path)
    encoder = load_model(path, head="base")
    batch = tiny_batch()
    assert torch.equal(encoder(**batch).last_hidden_state, full.base_model(**batch).last_hidden_state)


def test_missing_weights_file_is_an_error(tmp_path):
    path = _pruned(tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_model(path)


def test_corrupt_weights_are_an_error(tmp_path):
    path = _pruned(tmp_path)
    (path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="corrupt weights"):
        load_model(path)


def test_corrupt_config_is_an_error(tmp_path):
    path = _pruned(tmp_path)
    (path / "config.json").write_text("{ nope")
    with pytest.raises(CheckpointError, match="corrupt config.json"):
        load_model(path)


def test_record_that_disagrees_with_weights_is_an_error_not_a_reinit(tmp_path):
    path = _pruned(tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["ghostify"]["ffn"] = [20, 19]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"intermediate\.dense\.(weight|bias) has shape"):
        load_model(path)


def test_missing_checkpoint_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "nowhere")


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(UnsupportedModelError, match="unsupported architecture 'gpt2'.*bert, roberta"):
        load_model(tmp_path / "gpt2")


def test_existing_output_is_refused_unless_overwrite(tmp_path):
    model = tiny_model("bert")
    record = dense_record(model, get_adapter(model.config))
    save_checkpoint(model, tmp_path / "out", record)
    with pytest.raises(GhostifyError, match="already exists"):
        save_checkpoint(model, tmp_path / "out", record)
    save_checkpoint(model, tmp_path / "out", record, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_crash_while_writing_leaves_no_output_and_keeps_the_old_one(tmp_path):
    model = tiny_model("bert")
    record = dense_record(model, get_adapter(model.config))
    save_checkpoint(model, tmp_path / "out", record)
    before = _digest(tmp_path / "out")

    def explode(path: Path) -> None:
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_checkpoint(model, tmp_path / "new", record, extra_files={"scores": explode})
    with pytest.raises(RuntimeError):
        save_checkpoint(model, tmp_path / "out", record, extra_files={"scores": explode}, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no half checkpoint, no temp dirs
    assert _digest(tmp_path / "out") == before


def test_atomic_directory_refuses_existing(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(GhostifyError):
        with atomic_directory(tmp_path / "x"):
            pass


def test_corrupt_record_is_an_error():
    with pytest.raises(CheckpointError, match="corrupt ghostify record"):
        GhostifyRecord.from_dict({"heads": [[0, 1]], "ffn": []}, "config.json")
