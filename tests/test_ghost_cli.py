"""`ghostify attach-ghost` end to end: checkpoints, record, history, info, and one-line errors."""

from __future__ import annotations

import json

import pytest
import torch

from ghostify import load_model, save_checkpoint
from ghostify.checkpoint import model_record
from ghostify.methods.ghost import GhostLinear, GhostSettings, ghost_parameter_names
from ghostify.testing import HIDDEN, tiny_batch, tiny_model

from .conftest import run_cli


@pytest.fixture()
def checkpoint(tmp_path):
    """A tiny BERT classifier saved as a ghostify checkpoint (2 layers, hidden 32)."""
    model = tiny_model("bert", "sequence-classification")
    return save_checkpoint(model, tmp_path / "model", model_record(model))


@pytest.fixture()
def pruned_checkpoint(tmp_path, checkpoint, capsys):
    code, _, err = run_cli(capsys, "prune", checkpoint, "-o", tmp_path / "pruned", "--width", "2/4")
    assert code == 0, err
    return tmp_path / "pruned"


def test_attach_ghost_defaults_end_to_end(tmp_path, checkpoint, capsys):
    out = tmp_path / "ghost"
    code, stdout, err = run_cli(capsys, "attach-ghost", checkpoint, "-o", out)
    assert code == 0, err
    assert "384 new parameters" in err and f"wrote {out}" in err
    record = json.loads((out / "config.json").read_text())["ghostify"]
    ghost = record["methods"]["ghost"]
    assert ghost["settings"] == GhostSettings().to_dict()
    assert ghost["params"] == 2 * 2 * HIDDEN * 3
    assert ghost["parameters"] == [
        "encoder.layer.0.attention.output.dense.ghost.weight",
        "encoder.layer.0.output.dense.ghost.weight",
        "encoder.layer.1.attention.output.dense.ghost.weight",
        "encoder.layer.1.output.dense.ghost.weight",
    ]
    assert record["history"][-1]["command"] == "attach-ghost"
    assert record["history"][-1]["arguments"]["kernel_size"] == 3

    model = load_model(out)
    assert sum(isinstance(m, GhostLinear) for m in model.modules()) == 4
    assert sorted(ghost_parameter_names(model)) == sorted("bert." + n for n in ghost["parameters"])
    # the saved model is the original plus ghosts that start as ReLU of the 3-token mean
    original = load_model(checkpoint)
    batch = tiny_batch()
    assert not torch.allclose(model(**batch).logits, original(**batch).logits)

    code, stdout, err = run_cli(capsys, "info", out, "--json", "--seq-len", "16")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["ghost_params"] == 384
    assert data["ghost_flops"] == 4 * 2 * 16 * HIDDEN * 3
    code, base_stdout, _ = run_cli(capsys, "info", checkpoint, "--json", "--seq-len", "16")
    base = json.loads(base_stdout)
    assert base["ghost_params"] == 0 and base["ghost_flops"] == 0
    assert data["params"] - base["params"] == 384 and data["flops"] - base["flops"] == data["ghost_flops"]

    code, table, _ = run_cli(capsys, "info", out)  # the table is the result: stdout
    assert code == 0 and "ghost parameters" in table and "ghost FLOPs" in table and "dwconv k=3" in table


def test_attach_ghost_variants_on_a_pruned_model(tmp_path, pruned_checkpoint, capsys):
    out = tmp_path / "variant"
    code, _, err = run_cli(
        capsys, "attach-ghost", pruned_checkpoint, "-o", out, "--kernel-size", "5", "--no-softmax", "--no-relu",
        "--features", "2", "--per-head", "--conv", "conv2d", "--positions", "qk,v,o,ffn2", "--init", "zero-scale",
    )
    assert code == 0, err
    settings = model_record(load_model(out)).methods["ghost"]["settings"]
    assert settings == GhostSettings(kernel_size=5, softmax=False, relu=False, features=2, per_head=True, conv="conv2d",
                                     positions="qk,v,o,ffn2", init="zero-scale").to_dict()
    # --overwrite replaces; without it the existing output is refused
    code, _, err = run_cli(capsys, "attach-ghost", pruned_checkpoint, "-o", out)
    assert code == 2 and "--overwrite" in err
    code, _, err = run_cli(capsys, "attach-ghost", pruned_checkpoint, "-o", out, "--overwrite")
    assert code == 0, err
    assert model_record(load_model(out)).methods["ghost"]["settings"] == GhostSettings().to_dict()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kernel-size", "4"], "--kernel-size 4 is even"),
        (["--features", "0"], "--features 0"),
        (["--conv", "lstm"], "unknown --conv 'lstm'"),
        (["--positions", "o,attn"], "unknown --positions attn"),
        (["--positions", "ffn1", "--per-head"], "--per-head does not apply to position ffn1"),
        (["--positions", "qk", "--conv", "conv1d-feature"], "cannot act on attention maps"),
        (["--features", "3", "--kernel-size", "1"], "identical features"),
        (["--positions", "v"], "keeps all 4 heads"),
        (["--init", "ones"], "unknown --init 'ones'"),
    ],
)
def test_invalid_combinations_are_one_line_errors(tmp_path, checkpoint, capsys, args, message):
    code, _stdout, err = run_cli(capsys, "attach-ghost", checkpoint, "-o", tmp_path / "out", *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family", ["deberta-v2", "mpnet"])
def test_attention_positions_refused_for_families_without_the_interface(tmp_path, capsys, family):
    model = tiny_model(family)
    source = save_checkpoint(model, tmp_path / family, model_record(model))
    code, _, err = run_cli(capsys, "attach-ghost", source, "-o", tmp_path / "out", "--positions", "o,qk")
    assert code == 2 and err.count("\n") == 1
    assert f"which {family} models do not use; choose among o, ffn1, ffn2" in err


def test_attaching_to_a_ghosted_checkpoint_is_refused(tmp_path, checkpoint, capsys):
    assert run_cli(capsys, "attach-ghost", checkpoint, "-o", tmp_path / "g1")[0] == 0
    code, _, err = run_cli(capsys, "attach-ghost", tmp_path / "g1", "-o", tmp_path / "g2")
    assert code == 2 and "already has ghost modules" in err and err.count("\n") == 1


def test_help_states_what_the_model_computes_after_attaching(capsys):
    code, stdout, err = run_cli(capsys, "attach-ghost", "--help")
    text = " ".join((stdout + err).split())
    assert code == 0
    assert "Right after attaching the model's outputs change" in text
    assert "uniform average over its window" in text and "y + ReLU(mean of y over the k tokens" in text
    assert "55,296" in text and "ghostify attach-ghost out/pruned -o out/ghost" in text
