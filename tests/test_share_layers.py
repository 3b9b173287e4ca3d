"""share-layers (ALBERT): L layers in G contiguous groups, each group running ONE layer module."""

from __future__ import annotations

import copy
import json
from fractions import Fraction

import pytest
import torch
from safetensors import safe_open

from ghostify import load_model, save_checkpoint
from ghostify.architectures import get_adapter
from ghostify.checkpoint import model_record
from ghostify.errors import GhostifyError
from ghostify.flops import count_flops, count_params
from ghostify.methods.pruning import compute_importance, gated, magnitude_importance
from ghostify.methods.pruning.apply import prune
from ghostify.methods.sharing.apply import share
from ghostify.methods.sharing.settings import plan_groups
from ghostify.testing import tiny_batch, tiny_checkpoint, tiny_config, tiny_model, write_toy_dataset

from .conftest import ALL_FAMILIES, run_cli


def _deep(family: str, layers: int = 4, head: str = "sequence-classification"):
    key = "n_layers" if family == "distilbert" else "num_hidden_layers"
    extra = {"num_hidden_groups": layers} if family == "albert" else {}  # ALBERT: start unshared
    return tiny_model(family, head, **{key: layers}, **extra)


def _shared(family: str, groups: int = 2, init: str = "mean", layers: int = 4):
    model = _deep(family, layers)
    adapter = get_adapter(model.config)
    original = [copy.deepcopy(layer.state_dict()) for layer in adapter.applied_layers(model)]
    record = share(model, adapter, model_record(model), groups, init)
    return model, adapter, record, original


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_groups_share_one_module_initialised_with_the_mean(family):
    if get_adapter(tiny_config(family)).layers_not_interchangeable:  # ModernBERT
        with pytest.raises(GhostifyError, match="cannot share layers: .* not interchangeable"):
            _shared(family)
        return
    model, adapter, record, original = _shared(family)
    applied = adapter.applied_layers(model)
    assert applied[0] is applied[1] and applied[2] is applied[3] and applied[1] is not applied[2]
    assert adapter.layers(model) == [applied[0], applied[2]] and adapter.layer_applications(model) == [2, 2]
    for name, tensor in applied[0].state_dict().items():
        assert tensor.data_ptr() == applied[1].state_dict()[name].data_ptr()
        if tensor.is_floating_point():
            torch.testing.assert_close(tensor, (original[0][name] + original[1][name]) / 2)
            torch.testing.assert_close(applied[2].state_dict()[name], (original[2][name] + original[3][name]) / 2)
    assert len(record.heads) == 2 and record.entry("sharing")["groups"] == [[0, 1], [2, 3]]
    assert record.entry("sharing")["params_after"] == count_params(model) < record.entry("sharing")["params_before"]
    # every step still runs: the same FLOPs, half the layer parameters
    out = model(**tiny_batch(), output_hidden_states=True)
    assert len(out.hidden_states) == 5


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_save_load_is_exact_and_stores_each_shared_tensor_once(family, tmp_path):
    if get_adapter(tiny_config(family)).layers_not_interchangeable:
        pytest.skip(f"{family} layers cannot be shared (refused, see the test above)")
    model, adapter, record, _ = _shared(family)
    path = save_checkpoint(model, tmp_path / "shared", record)
    dense = _deep(family)
    dense_path = save_checkpoint(dense, tmp_path / "dense", model_record(dense))
    loaded = load_model(path)
    batch = tiny_batch()
    assert torch.equal(loaded(**batch).logits, model(**batch).logits)
    applied = get_adapter(loaded.config).applied_layers(loaded)
    assert applied[0] is applied[1] and applied[2] is applied[3]
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    with safe_open(str(dense_path / "model.safetensors"), "pt") as f:
        dense_keys = list(f.keys())
    per_layer = (len(dense_keys) - len(keys)) * 2  # half the layers' keys are gone
    assert per_layer > 0 and len(keys) == len(dense_keys) - per_layer // 2
    assert (path / "model.safetensors").stat().st_size < (dense_path / "model.safetensors").stat().st_size


def test_init_first_and_unequal_groups():
    model, adapter, record, original = _shared("bert", groups=2, init="first", layers=5)
    applied = adapter.applied_layers(model)
    assert record.entry("sharing")["groups"] == [[0, 1, 2], [3, 4]]  # sizes differ by one, the larger first
    assert adapter.layer_applications(model) == [3, 2]
    for name, tensor in applied[0].state_dict().items():
        assert torch.equal(tensor, original[0][name])
        assert torch.equal(applied[4].state_dict()[name], original[3][name])


def test_one_group_per_layer_changes_nothing():
    model = _deep("bert")
    batch = tiny_batch()
    expected = model(**batch).logits
    adapter = get_adapter(model.config)
    share(model, adapter, model_record(model), 4)
    assert torch.equal(model(**batch).logits, expected)


def test_albert_regroups_through_its_config(tmp_path):
    # the tiny ALBERT runs one shared layer 3 times; 3 groups split it into copies: same outputs
    model = tiny_model("albert", "sequence-classification")
    batch = tiny_batch()
    expected = model(**batch).logits
    adapter = get_adapter(model.config)
    record = share(model, adapter, model_record(model), 3)
    assert model.config.num_hidden_groups == 3 and adapter.layer_applications(model) == [1, 1, 1]
    torch.testing.assert_close(model(**batch).logits, expected)
    # and merging 4 unshared layers in 2 groups averages them
    path = save_checkpoint(model, tmp_path / "albert", record)
    assert json.loads((path / "config.json").read_text())["num_hidden_groups"] == 3
    assert torch.equal(load_model(path)(**batch).logits, model(**batch).logits)
    with pytest.raises(GhostifyError, match=r"--groups 2 does not divide ALBERT's 3 layers .*choose one of \[1, 3\]"):
        plan_groups(adapter, model.config, 2)


def test_prune_after_share_layers_keeps_the_sharing(tmp_path):
    model, adapter, record, _ = _shared("bert")
    scores = magnitude_importance(model, adapter)
    assert len(scores.heads) == 2
    _, record = prune(model, record, scores, heads_width=Fraction(1, 2), ffn_width=Fraction(1, 2))
    applied = adapter.applied_layers(model)
    assert applied[0] is applied[1] and record.heads_per_layer == [2, 2]
    assert adapter.submodule(applied[1], "attention.self.query").out_features == 16
    path = save_checkpoint(model, tmp_path / "p", record)
    loaded = load_model(path)
    batch = tiny_batch()
    assert torch.equal(loaded(**batch).logits, model(**batch).logits)
    applied = adapter.applied_layers(loaded)
    assert applied[0] is applied[1] and applied[2] is applied[3]


def test_importance_of_a_shared_layer_sums_the_gradients_of_its_applications():
    model, adapter, _, _ = _shared("bert")
    model.eval()
    batch = {**tiny_batch(batch_size=1, padded=False), "labels": torch.tensor([1])}
    scores = compute_importance(model, adapter, [batch])
    assert [t.numel() for t in scores.heads] == [4, 4]
    # the same weights, unshared: one gate per application, signed derivatives added by hand
    unshared = copy.deepcopy(model)
    slots = unshared.base_model.encoder.layer
    for i in range(4):
        slots[i] = copy.deepcopy(slots[i])
    u_adapter = get_adapter(unshared.config)
    with gated(unshared, u_adapter) as gates:
        gates.heads = [g.clone().requires_grad_(True) for g in gates.heads]
        gates.ffn = [g.clone().requires_grad_(True) for g in gates.ffn]
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        loss = torch.nn.functional.cross_entropy(unshared(**inputs).logits, batch["labels"])
        grads = torch.autograd.grad(loss, [*gates.heads, *gates.ffn])
    torch.testing.assert_close(scores.heads[0], (grads[0] + grads[1]).abs(), atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(scores.ffn[1], (grads[6] + grads[7]).abs(), atol=1e-6, rtol=1e-4)


def test_attach_ghost_after_share_layers_and_refused_before(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "m", num_hidden_layers=4)
    assert run_cli(capsys, "share-layers", source, "-o", tmp_path / "s", "--groups", "2")[0] == 0
    code, _, err = run_cli(capsys, "attach-ghost", tmp_path / "s", "-o", tmp_path / "g")
    assert code == 0, err
    assert "384 new parameters" in err  # 2 distinct layers x 2 modules x 32 x 3, not 4 layers
    ghosted = load_model(tmp_path / "g")
    applied = get_adapter(ghosted.config).applied_layers(ghosted)
    assert applied[0] is applied[1]
    code, _, err = run_cli(capsys, "share-layers", tmp_path / "g", "-o", tmp_path / "x", "--groups", "1")
    assert code == 2 and err.count("\n") == 1 and "share-layers before attach-ghost" in err


def test_sharing_layers_of_different_widths_is_refused(tmp_path, capsys):
    model = _deep("bert")
    adapter = get_adapter(model.config)
    scores = magnitude_importance(model, adapter)
    _, record = prune(model, model_record(model), scores, heads_width=Fraction(1, 2), ffn_width=Fraction(1, 2),
                      allocation="global")
    assert len(set(zip(record.heads_per_layer, record.ffn))) > 1
    path = save_checkpoint(model, tmp_path / "p", record)
    code, _, err = run_cli(capsys, "share-layers", path, "-o", tmp_path / "x", "--groups", "1")
    assert code == 2 and err.count("\n") == 1 and "share-layers before prune" in err, err


def test_flops_unchanged_params_counted_once_and_info(tmp_path, capsys):
    model, adapter, record, _ = _shared("bert")
    dense = _deep("bert")
    assert count_flops(model) == count_flops(dense)
    layer_params = count_params(get_adapter(dense.config).layers(dense))
    assert count_params(adapter.layers(model)) == layer_params // 2
    path = save_checkpoint(model, tmp_path / "s", record)
    code, out, _ = run_cli(capsys, "info", path, "--json")
    info = json.loads(out)
    assert info["params"] == count_params(dense) - layer_params // 2
    assert info["layer_applications"] == [2, 2] and info["sharing"]["groups"] == [[0, 1], [2, 3]]
    assert info["heads_per_layer"] == [4, 4]
    code, err, _ = run_cli(capsys, "info", path)  # the table is the result: stdout
    assert "4 layers in 2 groups of 2,2 (init mean)" in err


def test_distill_a_shared_student(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "m", num_hidden_layers=4)
    data = write_toy_dataset(tmp_path / "toy", train=32, validation=16)
    code, _, err = run_cli(capsys, "share-layers", source, "-o", tmp_path / "s", "--groups", "2")
    assert code == 0 and "4 layers in 2 groups of 2,2" in err
    code, _, err = run_cli(capsys, "distill", "--teacher", source, "--student", tmp_path / "s", "-o", tmp_path / "d",
                           "--dataset", data, "--text-columns", "sentence", "--label-column", "label",
                           "--max-length", "32", "--epochs", "1", "--batch-size", "16", "--attention-weight", "1")
    assert code == 0, err
    arguments = json.loads((tmp_path / "d" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    assert arguments["layer_map"] == "1:1,2:2,3:3,4:4"  # every application of a shared layer is matched
    student = load_model(tmp_path / "d")
    applied = get_adapter(student.config).applied_layers(student)
    assert applied[0] is applied[1] and applied[2] is applied[3]
    before = load_model(tmp_path / "s")
    assert not torch.equal(applied[0].output.dense.weight, before.base_model.encoder.layer[0].output.dense.weight)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--groups", "0"], "--groups 0 must be between 1 and the model's 2 layers"),
        (["--groups", "3"], "--groups 3 must be between 1 and the model's 2 layers"),
        (["--groups", "1", "--init", "avg"], "unknown --init 'avg'; choose one of mean, first"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, args, message):
    source = tiny_checkpoint(tmp_path / "m")
    code, _, err = run_cli(capsys, "share-layers", source, "-o", tmp_path / "out", *args)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, step", [("ghost", "attach-ghost"), ("grouped", "group-linear"),
                                         ("references", "distill --references")])
def test_later_structural_steps_are_refused_with_the_order(field, step):
    from dataclasses import replace

    from ghostify.methods import check_order

    model = _deep("bert")
    record = replace(model_record(model), methods={field: {"format": 1}})
    with pytest.raises(GhostifyError, match=f"share-layers before {step}"):
        check_order("sharing", record)
    with pytest.raises(GhostifyError, match=f"share-layers before {step}"):
        share(model, get_adapter(model.config), record, 2)


class _Crash(Exception):
    pass


def test_resumed_distill_of_a_shared_student_equals_an_uninterrupted_one(tmp_path):
    """accelerate's state files drop the shared copies; resuming must still restore them."""
    from ghostify.steps import distill, share_layers

    source = tiny_checkpoint(tmp_path / "m", num_hidden_layers=4)
    data = write_toy_dataset(tmp_path / "toy", train=64, validation=16)
    share_layers(source, tmp_path / "s", groups=2)
    args = dict(dataset=str(data), text_columns=("sentence",), label_column="label", max_length=32, epochs=2,
                batch_size=16, learning_rate=3e-3, checkpoint_steps=3)
    distill(source, tmp_path / "s", tmp_path / "whole", **args)

    def crash(step: int) -> None:
        if step == 6:
            raise _Crash

    with pytest.raises(_Crash):
        distill(source, tmp_path / "s", tmp_path / "resumed", on_step=crash, **args)
    distill(source, tmp_path / "s", tmp_path / "resumed", resume=True, **args)
    whole, resumed = load_model(tmp_path / "whole"), load_model(tmp_path / "resumed")
    a, b = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    applied = get_adapter(resumed.config).applied_layers(resumed)
    assert applied[0] is applied[1] and applied[2] is applied[3]
