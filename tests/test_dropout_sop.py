"""ALBERT's training findings: `--dropout`/`--attention-dropout` for finetune and distill, and
sentence-order prediction (`--sop-weight`) as an extra distillation loss."""

from __future__ import annotations

import csv
import random

import pytest
import torch

from ghostify.architectures import get_adapter
from ghostify.checkpoint import load_model
from ghostify.data import resolve_task
from ghostify.data.sop import IGNORE, add_sop_inputs, sop_collator, two_segments
from ghostify.tasks import kind_for
from ghostify.testing import TOY_WORDS, tiny_batch, tiny_checkpoint, tiny_config, tiny_tokenizer, write_toy_dataset

from .conftest import ALL_FAMILIES, run_cli

TOY = {"text_columns": ("sentence",), "label_column": "label"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=64, validation=16)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """A sentence-pair dataset (two text columns) over the toy vocabulary."""
    directory = tmp_path_factory.mktemp("pairs") / "data"
    directory.mkdir()
    rng = random.Random(0)
    for split, n in (("train", 64), ("validation", 16)):
        with (directory / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["first", "second", "label"])
            for _ in range(n):
                writer.writerow([" ".join(rng.choices(TOY_WORDS, k=5)), " ".join(rng.choices(TOY_WORDS, k=4)), rng.randint(0, 1)])
    return directory


# ---- dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_dropout_zero_makes_training_mode_deterministic(tmp_path, family):
    adapter = get_adapter(tiny_config(family))
    tiny_checkpoint(tmp_path / "m", family, **{a: 0.3 for a in adapter.dropout_attrs + adapter.attention_dropout_attrs})
    batch = tiny_batch()

    def two_forwards(model):
        model.train()
        with torch.no_grad():
            return [model(**batch).logits for _ in range(2)]

    a, b = two_forwards(load_model(tmp_path / "m"))
    assert not torch.equal(a, b)  # dropout is on
    model = load_model(tmp_path / "m", dropout=0.0, attention_dropout=0.0)
    a, b = two_forwards(model)
    assert torch.equal(a, b)
    model.eval()
    with torch.no_grad():  # no dropout in eval mode: the weights are the checkpoint's
        assert torch.allclose(model(**batch).logits, load_model(tmp_path / "m")(**batch).logits, atol=1e-6)
    adapter = get_adapter(model.config)
    assert all(getattr(model.config, a) == 0.0 for a in adapter.dropout_attrs + adapter.attention_dropout_attrs)


def test_attention_dropout_alone_leaves_hidden_dropout(tmp_path):
    tiny_checkpoint(tmp_path / "m", "bert", hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    model = load_model(tmp_path / "m", attention_dropout=0.0)
    assert model.config.attention_probs_dropout_prob == 0.0 and model.config.hidden_dropout_prob == 0.3


def test_finetune_and_distill_save_the_dropout_they_trained_with(tmp_path, toy, capsys):
    tiny_checkpoint(tmp_path / "t")
    data = ["--dataset", toy, "--text-columns", "sentence", "--label-column", "label", "--epochs", "1", "--batch-size", "32"]
    code, _, err = run_cli(capsys, "finetune", tmp_path / "t", "-o", tmp_path / "f", *data, "--dropout", "0",
                           "--attention-dropout", "0")
    assert code == 0, err
    config = load_model(tmp_path / "f").config
    assert config.hidden_dropout_prob == 0.0 and config.attention_probs_dropout_prob == 0.0
    assert config.ghostify["history"][-1]["arguments"]["dropout"] == 0.0
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "f", "--student", tmp_path / "t", "-o",
                           tmp_path / "d", *data, "--dropout", "0.05")
    assert code == 0, err
    config = load_model(tmp_path / "d").config
    assert config.hidden_dropout_prob == 0.05 and config.attention_probs_dropout_prob == 0.1


@pytest.mark.parametrize("value", ["1", "-0.1"])
def test_bad_dropout_is_a_one_line_error(tmp_path, toy, capsys, value):
    tiny_checkpoint(tmp_path / "t")
    code, out, err = run_cli(capsys, "finetune", tmp_path / "t", "-o", tmp_path / "f", "--dataset", toy,
                             "--text-columns", "sentence", "--label-column", "label", "--dropout", value)
    assert code == 2 and err.count("\n") == 1 and f"--dropout {float(value)}" in err and "[0, 1)" in err
    assert not (tmp_path / "f").exists()


# ---- sentence-order prediction ------------------------------------------------------------------
def test_two_segments():
    assert two_segments(["a b", "c d"]) == ("a b", "c d")
    assert two_segments(["One two. Three four five! Six."]) == ("One two.", "Three four five! Six.")
    # the cut is the sentence end nearest the middle
    assert two_segments(["Aaaa. Bbbbbbbbbbbbbbbbbbbbbbbbbbbb. C."]) == ("Aaaa.", "Bbbbbbbbbbbbbbbbbbbbbbbbbbbb. C.")
    assert two_segments(["no sentence end here"]) is None
    assert two_segments(["", None]) is None


def test_sop_inputs_swap_about_half_and_swap_exactly(tmp_path, pairs):
    from ghostify.data import load_split, padding_collator, tokenize

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    preset = resolve_task(None, text_columns=("first", "second"), label_column="label")
    data = load_split(str(pairs), preset, "train")
    rows = add_sop_inputs(tokenize(data, tokenizer), data, tokenizer, max_length=32, seed=0)
    labels = rows["sop_labels"]
    assert set(labels) == {0, 1} and 16 < sum(labels) < 48
    for i in range(8):
        a, b = data.rows[i]["first"], data.rows[i]["second"]
        expected = tokenizer(b, a) if labels[i] else tokenizer(a, b)
        assert rows[i]["sop_input_ids"] == expected["input_ids"]
        assert rows[i]["input_ids"] == tokenizer(a, b)["input_ids"]  # the main inputs are untouched
    batch = sop_collator(padding_collator(tokenizer), tokenizer)([rows[i] for i in range(4)])
    assert batch["sop_input_ids"].shape[0] == 4 and batch["sop_labels"].tolist() == labels[:4]
    assert batch["input_ids"].shape[0] == 4 and "sop_labels" not in {k for k in batch if not k.startswith("sop_")}
    again = add_sop_inputs(tokenize(data, tokenizer), data, tokenizer, max_length=32, seed=0)
    assert again["sop_labels"] == labels  # drawn from the seed


def test_sop_loss_is_the_cross_entropy_of_the_sop_classifier(tmp_path, pairs):
    from ghostify.data import load_split, padding_collator, tokenize
    from ghostify.training.layer_map import build_layer_map
    from ghostify.training.objectives import DistillObjective, DistillWeights

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    preset = resolve_task(None, text_columns=("first", "second"), label_column="label")
    data = load_split(str(pairs), preset, "train")
    rows = add_sop_inputs(tokenize(data, tokenizer), data, tokenizer, max_length=32, seed=0)
    batch = sop_collator(padding_collator(tokenizer), tokenizer)([rows[i] for i in range(6)])
    batch["sop_labels"][0] = IGNORE  # an example without two segments is skipped
    tiny_checkpoint(tmp_path / "m")
    student, teacher = load_model(tmp_path / "m"), load_model(tmp_path / "m")
    objective = DistillObjective(student, teacher, weights=DistillWeights(sop_weight=0.5),
                                 layer_map=build_layer_map(2, 2, None), kind=kind_for(resolve_task("sst2"))).eval()
    loss, parts = objective(dict(batch))
    with torch.no_grad():
        sop = {k[4:]: v[1:] for k, v in batch.items() if k.startswith("sop_") and k != "sop_labels"}
        first = student(**sop, output_hidden_states=True).hidden_states[-1][:, 0]
        expected = torch.nn.functional.cross_entropy(objective.projections["sop"](first), batch["sop_labels"][1:])
    assert torch.allclose(parts["sop_loss"], expected, atol=1e-6)
    rest = parts["emb_loss"] + parts["mha_loss"] + parts["ffn_loss"]
    assert torch.allclose(loss, rest + 0.5 * expected, atol=1e-6)


def test_distill_with_sop_on_pairs_saves_the_classifier_apart(tmp_path, pairs, capsys):
    from safetensors.torch import load_file

    tiny_checkpoint(tmp_path / "t")
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "t", "--student", tmp_path / "t", "-o",
                           tmp_path / "d", "--dataset", pairs, "--text-columns", "first,second", "--label-column",
                           "label", "--epochs", "1", "--batch-size", "16", "--sop-weight", "1")
    assert code == 0, err
    extra = load_file(str(tmp_path / "d" / "distill_projections.safetensors"))
    assert extra["sop.weight"].shape == (2, 32)
    assert not any("sop" in k for k in load_model(tmp_path / "d").state_dict())


def test_sop_on_single_sentences_is_a_one_line_error(tmp_path, toy, capsys):
    tiny_checkpoint(tmp_path / "t")
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "t", "--student", tmp_path / "t", "-o",
                           tmp_path / "d", "--dataset", toy, "--text-columns", "sentence", "--label-column", "label",
                           "--sop-weight", "1")
    assert code == 2 and err.count("\n") == 1 and "two segments" in err and "--sop-weight 0" in err
