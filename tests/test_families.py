"""Today's encoders (issue 13): ModernBERT's fused projections, EuroBERT's grouped-query attention,
the gated FFNs, by hand; every command and a shipped recipe on a tiny model of each new family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model, save_checkpoint
from ghostify import recipe as recipes
from ghostify.architectures import get_adapter
from ghostify.attention import use_attention_kernel
from ghostify.errors import GhostifyError
from ghostify.methods.pruning import gated, prune_model
from ghostify.methods.pruning.apply import dense_record
from ghostify.testing import FFN, HEADS, HIDDEN, tiny_batch, tiny_checkpoint, tiny_model, write_toy_dataset

from .conftest import CHAIN_FAMILIES, NEW_FAMILIES, REPO, family_params, run_cli

HEAD = HIDDEN // HEADS
TOY = {"text_columns": ("sentence",), "label_column": "label"}


# ----- ModernBERT: fused Wqkv and Wi, by hand ------------------------------------------------------------
def test_modernbert_pruning_removes_exactly_the_fused_blocks_of_a_head_and_a_neuron():
    model = tiny_model("modernbert")
    adapter = get_adapter(model.config)
    layer = model.layers[1]
    wqkv, wo = layer.attn.Wqkv.weight.detach().clone(), layer.attn.Wo.weight.detach().clone()
    wi, w2 = layer.mlp.Wi.weight.detach().clone(), layer.mlp.Wo.weight.detach().clone()
    heads, neurons = [3, 0], [30, 2, 11]
    keep = dense_record(model, adapter)
    keep_heads = [list(range(HEADS)), heads, list(range(HEADS))]
    keep_neurons = [list(range(FFN)), neurons, list(range(FFN))]
    prune_model(model, adapter, keep, keep_heads, keep_neurons)

    def rows(block: int, head: int) -> torch.Tensor:  # Wqkv rows: [all q heads; all k heads; all v heads]
        start = block * HIDDEN + head * HEAD
        return wqkv[start:start + HEAD]

    expected_qkv = torch.cat([rows(block, h) for block in range(3) for h in heads])
    expected_o = torch.cat([wo[:, h * HEAD:(h + 1) * HEAD] for h in heads], dim=1)
    expected_wi = torch.cat([wi[neurons], wi[[FFN + n for n in neurons]]])  # input half, then gate half
    assert torch.equal(layer.attn.Wqkv.weight, expected_qkv)
    assert torch.equal(layer.attn.Wo.weight, expected_o)
    assert torch.equal(layer.mlp.Wi.weight, expected_wi)
    assert torch.equal(layer.mlp.Wo.weight, w2[:, neurons])
    assert layer.attn.Wqkv.bias is None and layer.mlp.Wi.bias is None  # no biases appear


def test_modernbert_sliding_window_layers_stay_sliding_window_after_prune_and_reload(tmp_path):
    model = tiny_model("modernbert", "sequence-classification")
    adapter = get_adapter(model.config)
    assert model.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    batch = tiny_batch(seq_len=12, padded=False)
    everywhere = tiny_model("modernbert", "sequence-classification", global_attn_every_n_layers=1)
    with torch.no_grad():  # the window matters on these inputs: the check below can fail
        assert not torch.allclose(model(**batch).logits, everywhere(**batch).logits, atol=1e-4)
    windows = [(layer.attention_type, layer.attn.sliding_window) for layer in model.model.layers]
    record = dense_record(model, adapter)
    record = prune_model(model, adapter, record, [[1, 2], [0], [3, 1, 2]], [list(range(0, FFN, 3))] * 3)
    assert [(layer.attention_type, layer.attn.sliding_window) for layer in model.model.layers] == windows
    save_checkpoint(model, tmp_path / "pruned", record)
    loaded = load_model(tmp_path / "pruned")
    assert [(layer.attention_type, layer.attn.sliding_window) for layer in loaded.model.layers] == windows
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)


# ----- EuroBERT: grouped-query attention ------------------------------------------------------------------
def test_eurobert_units_are_key_value_groups_that_survive_uneven_pruning_and_reload(tmp_path):
    model = tiny_model("eurobert", "sequence-classification")
    adapter = get_adapter(model.config)
    assert adapter.num_units(model.config) == 2 and adapter.heads_per_unit(model.config) == 2
    batch = tiny_batch()
    head_gates = [torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])]
    with torch.no_grad(), gated(model, adapter, heads=head_gates):
        masked = model(**batch).logits
    record = prune_model(model, adapter, dense_record(model, adapter), [[1], [1, 0]], [list(range(FFN)), [4, 9]])
    attention = [layer.self_attn for layer in model.model.layers]
    # layer 0 keeps group 1: its 2 query heads and its 1 K/V head; the group size stays 2
    assert attention[0].q_proj.out_features == 2 * HEAD and attention[0].k_proj.out_features == HEAD
    assert attention[0].v_proj.out_features == HEAD and attention[0].o_proj.in_features == 2 * HEAD
    assert attention[1].q_proj.out_features == 4 * HEAD and attention[1].k_proj.out_features == 2 * HEAD
    assert all(a.num_key_value_groups == 2 for a in attention)
    assert record.heads == [[1], [1, 0]] and record.ffn == [FFN, 2]
    save_checkpoint(model, tmp_path / "gqa", record)
    loaded = load_model(tmp_path / "gqa")
    own, back = model.state_dict(), loaded.state_dict()
    assert own.keys() == back.keys() and all(torch.equal(own[k], back[k]) for k in own)
    assert [a.num_key_value_groups for a in (layer.self_attn for layer in loaded.model.layers)] == [2, 2]
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)
    # the heads alone, pruned as the gates zeroed them, give the gated dense model's outputs
    dense = tiny_model("eurobert", "sequence-classification")
    prune_model(dense, adapter, dense_record(dense, adapter), [[1], [0, 1]], [list(range(FFN))] * 2)
    with torch.no_grad():
        torch.testing.assert_close(dense(**batch).logits, masked, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["eurobert", "modernbert", "gte"])
def test_ghostify_attention_kernel_equals_the_familys_eager_attention(family):
    """Grouped K/V heads are repeated for their query heads; sliding windows come in the mask."""
    model = tiny_model(family, attn_implementation="eager")
    batch = tiny_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        reference = model(**batch).last_hidden_state
        for layer in get_adapter(model.config).layers(model):
            use_attention_kernel(layer.get_submodule(get_adapter(model.config).paths_for_layer(layer).attention))
        torch.testing.assert_close(model(**batch).last_hidden_state[real], reference[real], atol=1e-6, rtol=1e-5)


def test_gqa_importance_has_one_score_per_key_value_group(tmp_path):
    from ghostify.methods.pruning import compute_importance

    model = tiny_model("eurobert", "sequence-classification")
    scores = compute_importance(model, get_adapter(model.config), [dict(tiny_batch(), labels=torch.tensor([0, 1, 0]))])
    assert [t.numel() for t in scores.heads] == [2, 2] and all(t.sum() > 0 for t in scores.heads)


# ----- every command on every new family ------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=32, validation=16)


def _cli(capsys, *args) -> str:
    code, out, err = run_cli(capsys, *map(str, args))
    assert code == 0, err
    return out


@pytest.mark.parametrize("family", family_params(NEW_FAMILIES, CHAIN_FAMILIES))
def test_every_command_works_on_the_family(family, toy, tmp_path, capsys):
    root = tmp_path
    tiny_checkpoint(root / "m", family)
    data = ["--dataset", toy, "--text-columns", "sentence", "--label-column", "label", "--max-length", "32"]
    short = ["--epochs", "1", "--batch-size", "16", "--max-samples", "32"]
    _cli(capsys, "finetune", root / "m", "-o", root / "teacher", *data, *short)
    _cli(capsys, "importance", root / "teacher", "-o", root / "scored", *data, "--samples", "16")
    _cli(capsys, "prune", root / "scored", "-o", root / "pruned", "--width", "2/4", "--allocation", "global")
    _cli(capsys, "attach-ghost", root / "pruned", "-o", root / "ghost", "--positions", "qk,v,o,ffn1,ffn2")
    _cli(capsys, "distill", "--teacher", root / "teacher", "--student", root / "ghost", "-o", root / "distilled",
         *data, *short, "--attention-weight", "1", "--logit-weight", "1")
    _cli(capsys, "finetune", root / "distilled", "-o", root / "final", *data, *short)
    metrics = json.loads(_cli(capsys, "eval", root / "final", *data, "--json"))
    assert 0.0 <= metrics["metrics"]["accuracy"] <= 1.0 and metrics["samples"] == 16
    info, dense = (json.loads(_cli(capsys, "info", root / name, "--json")) for name in ("final", "teacher"))
    assert info["flops"] < dense["flops"] and info["params"] < dense["params"]
    _cli(capsys, "export", root / "final", "-o", root / "hf", "--format", "hf")
    # the other structural methods, where the family supports them
    _cli(capsys, "group-linear", root / "teacher", "-o", root / "grouped", "--groups", "2", "--modules", "qkv,o",
         "--no-permute")
    _cli(capsys, "factorize-embeddings", root / "teacher", "-o", root / "factorized", "--rank", "8")
    adapter = get_adapter(load_model(root / "teacher").config)
    code, _, err = run_cli(capsys, "share-layers", root / "teacher", "-o", root / "shared", "--groups", "1")
    if adapter.layers_not_interchangeable:
        assert code != 0 and len(err.strip().splitlines()) == 1 and "not interchangeable" in err
    else:
        assert code == 0, err


@pytest.mark.parametrize("family", family_params(NEW_FAMILIES, CHAIN_FAMILIES))
def test_the_quickstart_recipe_runs_on_the_family(family, toy, tmp_path):
    tiny_checkpoint(tmp_path / "model", family)
    overrides = [f"model={tmp_path / 'model'}", f"data.dataset={toy}", "data.task=null", "data.text_columns=[sentence]",
                 "data.label_column=label", "data.max_length=32", "vars.samples=32", "importance.samples=16",
                 "distill.batch_size=16", "finetune.batch_size=16", "vars.ghosts=true"]  # ghosts through ONNX int8
    recipe = recipes.load(REPO / "recipes" / "quickstart.yaml", overrides)
    assert "attach-ghost" in [stage.command.name for stage in recipe.stages]
    report = recipes.run(recipe, tmp_path / "run")
    assert [row["status"] for row in report["stages"]] == ["ran"] * len(recipe.stages)
    assert report["stages"][-1]["metrics"]


@pytest.mark.parametrize("family", family_params(NEW_FAMILIES, CHAIN_FAMILIES))
def test_a_resumed_distill_equals_an_uninterrupted_one(family, toy, tmp_path):
    from ghostify.steps import distill, prune

    tiny_checkpoint(tmp_path / "teacher", family)
    with pytest.warns(UserWarning, match="weight magnitude"):
        prune(tmp_path / "teacher", tmp_path / "student", width="2/4")
    args = dict(dataset=str(toy), **TOY, epochs=2, batch_size=8, max_samples=16, checkpoint_steps=1,
                attention_weight=1.0, seed=1)
    distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "whole", **args)

    class Crash(Exception):
        pass

    def crash(step: int) -> None:
        if step == 3:
            raise Crash

    with pytest.raises(Crash):
        distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "resumed", on_step=crash, **args)
    with pytest.raises(GhostifyError, match="--resume"):
        distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "resumed", **args)
    distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "resumed", resume=True, **args)
    whole, resumed = load_model(tmp_path / "whole").state_dict(), load_model(tmp_path / "resumed").state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


@pytest.mark.slow  # a base-sized model (149M parameters) built twice: 38 s
def test_modernbert_base_sizes_match_the_hand_count(tmp_path, capsys):
    """ModernBertConfig() (22 layers, hidden 768, 12 heads of 64, FFN 1152, no biases) at seq 128:
    per layer 2·n·(d·3d + d·d + d·2f + f·d) for the projections plus 2·2·n²·d for QKᵀ and PV."""
    from transformers import ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    ModernBertModel(ModernBertConfig()).save_pretrained(tmp_path / "base")
    n, d, layers, vocab = 128, 768, 22, 50368

    def flops(heads: int, ffn: int) -> int:
        width = heads * 64
        return layers * (2 * n * (d * 3 * width + width * d + d * 2 * ffn + ffn * d) + 2 * 2 * n * n * width)

    def params(heads: int, ffn: int) -> int:
        width = heads * 64
        per_layer = d * 3 * width + width * d + d * 2 * ffn + ffn * d + 2 * d  # two norms (layer 0: one)
        return vocab * d + d + layers * per_layer - d + d  # embeddings + their norm, layers, final norm

    data = json.loads(_cli(capsys, "info", tmp_path / "base", "--json"))
    assert (data["params"], data["flops"]) == (params(12, 1152), flops(12, 1152))
    assert data["flops"] == 29_343_350_784
    _cli(capsys, "prune", tmp_path / "base", "-o", tmp_path / "quarter", "--width", "3/12")
    data = json.loads(_cli(capsys, "info", tmp_path / "quarter", "--json"))
    assert (data["params"], data["flops"]) == (params(3, 288), flops(3, 288))
    assert data["heads_per_layer"] == [3] * 22 and data["ffn_per_layer"] == [288] * 22
