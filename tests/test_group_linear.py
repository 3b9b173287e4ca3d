"""group-linear (SqueezeBERT): grouped projections equal the dense layer's diagonal blocks, a
permuted model equals the dense one with the off-block weights zeroed (original channel order),
parameters and FLOPs fall by G, and the structure survives save -> load and composes."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from ghostify import GhostifyError, load_model
from ghostify.architectures import get_adapter
from ghostify.flops import count_params, measure
from ghostify.methods.ghost import GhostSettings, attach_ghosts
from ghostify.methods.grouped.apply import _axis_names, group_linear, why_not_permutable
from ghostify.methods.grouped.modules import GroupedLinear
from ghostify.methods.grouped.settings import MODULES
from ghostify.methods.pruning.apply import dense_record
from ghostify.steps import attach_ghost, prune
from ghostify.steps import group_linear as group_linear_step
from ghostify.testing import tiny_batch, tiny_checkpoint, tiny_model

from .conftest import ALL_FAMILIES, run_cli

FFN = 36  # the tiny models' FFN width (37) is prime; 36 takes G = 2 and 4


def _ffn(family: str) -> dict:
    return {"hidden_dim": FFN} if family == "distilbert" else {"intermediate_size": FFN}


def _tiny(family: str, head: str = "base"):
    return tiny_model(family, head, **_ffn(family))


def _permutable(family: str, modules: list[str]) -> bool:
    """Whether --permute works on these modules of the family (fused and grouped-query ones refuse)."""
    model = _tiny(family)
    adapter = get_adapter(model.config)
    return why_not_permutable(adapter, model.config, adapter.paths_for_layer(adapter.layers(model)[0]), modules) is None


def _masked_dense(model, result, modules):
    """The dense model with every weight outside the blocks zeroed, in the original channel order."""
    dense = copy.deepcopy(model)
    adapter = get_adapter(dense.config)
    groups = result.groups

    def labels(order: torch.Tensor) -> torch.Tensor:
        n = order.numel()
        lab = torch.empty(n, dtype=torch.long)
        lab[order] = torch.arange(n) // (n // groups)
        return lab

    for layer, grouping in zip(adapter.layers(dense), result.layers):
        paths = adapter.paths_for_layer(layer)

        def order(axis: str, size: int) -> torch.Tensor:
            # a side with its own width (grouped-query K/V, a fused FFN) is never permuted
            found = grouping.orders.get(axis)
            return found if found is not None and found.numel() == size else torch.arange(size)

        for name in modules:
            for attr in MODULES[name]:
                if getattr(paths, attr) is None:
                    continue
                linear = adapter.submodule(layer, getattr(paths, attr))
                rows, cols = _axis_names(attr)
                mask = (labels(order(rows, linear.out_features))[:, None]
                        == labels(order(cols, linear.in_features))[None, :])
                with torch.no_grad():
                    linear.weight.mul_(mask)
    return dense


# ----- the module ------------------------------------------------------------------------------
def test_one_group_equals_the_dense_layer_exactly():
    torch.manual_seed(0)
    dense = nn.Linear(24, 40)
    grouped = GroupedLinear.from_linear(dense, 1)
    x = torch.randn(3, 7, 24, requires_grad=True)
    assert torch.equal(grouped(x), dense(x))  # autograd path
    with torch.no_grad():
        assert torch.equal(grouped(x), dense(x))


@pytest.mark.parametrize("groups", [2, 4, 8])
def test_blocks_are_the_dense_weights_diagonal_blocks_and_both_forward_paths_agree(groups):
    torch.manual_seed(0)
    dense = nn.Linear(32, 48)
    grouped = GroupedLinear.from_linear(dense, groups)
    assert grouped.weight.shape == (groups, 48 // groups, 32 // groups)
    o, i = 48 // groups, 32 // groups
    for g in range(groups):
        assert torch.equal(grouped.weight[g], dense.weight[g * o : (g + 1) * o, g * i : (g + 1) * i])
    masked = torch.block_diag(*[torch.ones(o, i)] * groups) * dense.weight
    assert torch.equal(grouped.dense_weight(), masked.detach())
    x = torch.randn(5, 3, 32)
    reference = torch.nn.functional.linear(x, masked, dense.bias)
    with torch.no_grad():
        fast = grouped(x)  # one addmm per group into the output
    trained = grouped(x.requires_grad_())  # baddbmm under autograd
    torch.testing.assert_close(fast, reference.detach())
    torch.testing.assert_close(trained, reference)
    trained.sum().backward()
    assert grouped.weight.grad is not None and grouped.weight.grad.shape == grouped.weight.shape
    assert count_params(grouped) == 32 * 48 // groups + 48


def test_gathers_put_channels_back_in_the_original_order():
    torch.manual_seed(0)
    dense = nn.Linear(8, 6)
    inp, out = torch.randperm(8), torch.randperm(6)
    grouped = GroupedLinear.from_linear(dense, 2, input_order=inp, output_order=out)
    w = grouped.dense_weight()
    # the kept entries are the dense ones, at their original positions
    kept = w != 0
    assert torch.equal(w[kept], dense.weight.detach()[kept])
    assert set(inp[:4].tolist()) == set(torch.nonzero(kept[out[0]]).flatten().tolist())
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(grouped(x), torch.nn.functional.linear(x, w, dense.bias))


# ----- the permutation search -----------------------------------------------------------------
def test_permutation_recovers_a_hidden_block_structure():
    """FFN weights that are block-diagonal up to unknown channel orders: the search finds blocks
    that keep all of the norm; the identity blocks keep about 1/G."""
    model = _tiny("bert")
    adapter = get_adapter(model.config)
    groups, hidden = 4, 32
    g = torch.Generator().manual_seed(1)
    for layer in adapter.layers(model):
        paths = adapter.paths_for_layer(layer)
        up, down = adapter.submodule(layer, paths.ffn_up), adapter.submodule(layer, paths.ffn_down)
        blocks_up = torch.block_diag(*[torch.randn(FFN // groups, hidden // groups, generator=g) for _ in range(groups)])
        blocks_down = torch.block_diag(*[torch.randn(hidden // groups, FFN // groups, generator=g) for _ in range(groups)])
        p_in, p_inter, p_out = torch.randperm(hidden, generator=g), torch.randperm(FFN, generator=g), torch.randperm(hidden, generator=g)
        with torch.no_grad():
            up.weight.copy_(blocks_up[p_inter][:, p_in])
            down.weight.copy_(blocks_down[p_out][:, p_inter])
    reference = copy.deepcopy(model)
    result = group_linear(model, adapter, dense_record(model, adapter), groups=groups, modules=["ffn"])
    assert result.fraction("kept") == pytest.approx(1.0, abs=1e-6)
    assert result.fraction("kept_identity") < 0.5
    batch = tiny_batch()
    with torch.no_grad():  # nothing was dropped, so the grouped model equals the dense one
        torch.testing.assert_close(model(**batch).last_hidden_state, reference(**batch).last_hidden_state, atol=1e-5, rtol=1e-5)


# ----- every family -----------------------------------------------------------------------------
@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("modules", [["qkv", "o", "ffn"], ["ffn"]], ids=["qkv,o,ffn", "ffn"])
@pytest.mark.parametrize("permute", [True, False], ids=["permute", "no-permute"])
def test_grouped_model_equals_the_masked_dense_model(family, modules, permute):
    model = _tiny(family)
    adapter = get_adapter(model.config)
    before = measure(model, seq_len=16)
    grouped = copy.deepcopy(model)
    if permute and why_not_permutable(adapter, model.config, adapter.paths_for_layer(adapter.layers(model)[0]), modules):
        with pytest.raises(GhostifyError, match="pass --no-permute"):
            group_linear(grouped, adapter, dense_record(grouped, adapter), groups=4, modules=modules, permute=permute)
        return
    result = group_linear(grouped, adapter, dense_record(grouped, adapter), groups=4, modules=modules, permute=permute)
    reference = _masked_dense(model, result, modules)
    batch = tiny_batch()
    with torch.no_grad():
        out = grouped(**batch).last_hidden_state
        expected = reference(**batch).last_hidden_state
        unmasked = model(**batch).last_hidden_state
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    # the zeroed blocks matter (100x the tolerance; a gated FFN's product of two small initial
    # projections moves the output least): the comparison can fail
    assert (out - unmasked).abs().max() > 1e-3
    assert result.fraction("kept") >= result.fraction("kept_identity")
    if not permute:
        assert result.fraction("kept") == result.fraction("kept_identity")
        assert not any(m.input_index is not None or m.output_index is not None
                       for m in grouped.modules() if isinstance(m, GroupedLinear))

    # parameters and FLOPs of the grouped projections fall by G = 4 (biases stay)
    after = measure(grouped, seq_len=16)
    dense_weights = applications = 0
    for layer, times in zip(adapter.layers(model), adapter.layer_applications(model)):
        paths = adapter.paths_for_layer(layer)
        for name in modules:
            for attr in MODULES[name]:
                if getattr(paths, attr) is None:
                    continue
                w = adapter.submodule(layer, getattr(paths, attr)).weight
                dense_weights += w.numel()
                applications += times * w.numel()
    assert before.params - after.params == dense_weights * 3 // 4
    assert before.flops - after.flops == 2 * 16 * applications * 3 // 4


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_save_load_is_exact_and_info_reports_groups(family, tmp_path, capsys):
    tiny_checkpoint(tmp_path / "m", family, **_ffn(family))
    permute = _permutable(family, ["qkv", "o", "ffn"])
    record = group_linear_step(tmp_path / "m", tmp_path / "g", groups=2, modules="qkv,o,ffn", permute=permute)
    assert record.entry("grouped")["groups"] == 2 and record.entry("grouped")["modules"] == ["qkv", "o", "ffn"]
    assert record.entry("grouped")["kept_norm"] >= record.entry("grouped")["kept_norm_identity"]
    # the same steps in memory give the same model as the saved and loaded one
    net = load_model(tmp_path / "m")
    adapter = get_adapter(net.config)
    group_linear(net, adapter, dense_record(net, adapter), groups=2, modules=["qkv", "o", "ffn"], permute=permute)
    loaded = load_model(tmp_path / "g")
    assert type(loaded) is type(net)
    own, back = net.state_dict(), loaded.state_dict()
    assert own.keys() == back.keys() and all(torch.equal(own[k], back[k]) for k in own)
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(net(**batch).logits, loaded(**batch).logits)
    code, out, err = run_cli(capsys, "info", tmp_path / "g", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["grouped"]["groups"] == 2 and data["history"][-1]["command"] == "group-linear"


# ----- composition --------------------------------------------------------------------------------
def test_prune_then_group_works_and_group_then_prune_is_refused(tmp_path, capsys):
    tiny_checkpoint(tmp_path / "m", **_ffn("bert"))
    with pytest.warns(UserWarning, match="weight magnitude"):
        prune(tmp_path / "m", tmp_path / "p", heads_width="2/4", ffn_width="0.5")
    record = group_linear_step(tmp_path / "p", tmp_path / "pg", groups=2, modules="qkv,o,ffn")
    assert record.heads_per_layer == [2, 2] and record.ffn == [18, 18]
    assert sorted(record.heads[0]) == sorted(load_model(tmp_path / "p").config.ghostify["heads"][0])
    loaded = load_model(tmp_path / "pg")
    assert loaded(**tiny_batch()).logits.shape == (3, 2)
    code, _, err = run_cli(capsys, "prune", tmp_path / "pg", "-o", tmp_path / "x", "--width", "0.5")
    assert code != 0 and "prune before group-linear" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(GhostifyError, match="before attach-ghost"):
        attach_ghost(tmp_path / "p", tmp_path / "pgh")
        group_linear_step(tmp_path / "pgh", tmp_path / "y")


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_attach_ghost_after_group_linear(family, tmp_path):
    tiny_checkpoint(tmp_path / "m", family, **_ffn(family))
    group_linear_step(tmp_path / "m", tmp_path / "g", groups=4, modules="qkv,o,ffn",
                      permute=_permutable(family, ["qkv", "o", "ffn"]))
    record = attach_ghost(tmp_path / "g", tmp_path / "gh", positions="o,ffn2")
    assert record.entry("ghost") and record.entry("grouped")
    grouped, ghosted = load_model(tmp_path / "g"), load_model(tmp_path / "gh")
    batch = tiny_batch()
    with torch.no_grad():
        expected = copy.deepcopy(grouped)
        attach_ghosts(expected, GhostSettings(positions="o,ffn2"))
        assert torch.equal(expected(**batch).logits, ghosted(**batch).logits)  # saved -> loaded exactly
        assert not torch.equal(grouped(**batch).logits, ghosted(**batch).logits)  # the ghosts do something
    # training reaches the grouped blocks through the ghost wrapper
    ghosted.train()
    ghosted(**batch, labels=torch.tensor([0, 1, 0])).loss.backward()
    adapter = get_adapter(ghosted.config)
    o_proj = adapter.submodule(adapter.layers(ghosted)[0], adapter.paths_for_layer(adapter.layers(ghosted)[0]).attention_output)
    assert o_proj.weight.dim() == 3 and o_proj.weight.grad is not None and o_proj.weight.grad.abs().sum() > 0


def test_attach_ghost_per_head_on_grouped_output_is_refused(tmp_path):
    tiny_checkpoint(tmp_path / "m", **_ffn("bert"))
    group_linear_step(tmp_path / "m", tmp_path / "g", groups=2, modules="o")
    with pytest.raises(GhostifyError, match="--per-head"):
        attach_ghost(tmp_path / "g", tmp_path / "gh", per_head=True)


# ----- bad input ------------------------------------------------------------------------------------
def test_bad_groups_and_modules_are_one_line_errors(tmp_path, capsys):
    tiny_checkpoint(tmp_path / "m")  # FFN 37: only G = 1 divides it
    code, _, err = run_cli(capsys, "group-linear", tmp_path / "m", "-o", tmp_path / "g", "--groups", "4", "--modules", "ffn")
    assert code != 0 and "does not divide the ffn width 37" in err and "valid --groups" in err and ": 1\n" in err + "\n"
    code, _, err = run_cli(capsys, "group-linear", tmp_path / "m", "-o", tmp_path / "g", "--groups", "3", "--modules", "qkv")
    assert code != 0 and "valid --groups for --modules qkv on this model: 1, 2, 4, 8, 16, 32" in err
    code, _, err = run_cli(capsys, "group-linear", tmp_path / "m", "-o", tmp_path / "g", "--modules", "qkv,ffn3")
    assert code != 0 and "unknown ffn3" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g").exists()
    code, _, err = run_cli(capsys, "group-linear", tmp_path / "m", "-o", tmp_path / "g", "--groups", "2", "--modules", "qkv")
    assert code == 0, err
    assert "kept squared weight norm" in err
    code, _, err = run_cli(capsys, "group-linear", tmp_path / "g", "-o", tmp_path / "g2", "--groups", "2", "--modules", "qkv")
    assert code != 0 and "already has grouped layers" in err


def _index_selects(model, batch) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.index_select:
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Count():
        model(**batch)
    return Count.calls


def test_q_k_v_share_one_gather_per_layer(tmp_path):
    """A permuted model gathers the residual stream once for Q, K and V together, once before
    FFN-up and once after O and FFN-down: 4 gathers per layer, also after save -> load."""
    tiny_checkpoint(tmp_path / "m", **_ffn("bert"))
    group_linear_step(tmp_path / "m", tmp_path / "g", groups=2, modules="qkv,o,ffn")
    group_linear_step(tmp_path / "m", tmp_path / "n", groups=2, modules="qkv,o,ffn", permute=False)
    batch = tiny_batch()
    plain = _index_selects(load_model(tmp_path / "n"), batch)
    assert _index_selects(load_model(tmp_path / "g"), batch) - plain == 2 * 4


def test_deberta_shared_attention_keys_reuse_no_stale_gather():
    """DeBERTa with share_att_key runs the query and key projections on the relative-position
    embeddings too: a gather cached for the hidden states must not be reused for them."""
    model = tiny_model("deberta-v2", share_att_key=True, **_ffn("deberta-v2"))
    adapter = get_adapter(model.config)
    grouped = copy.deepcopy(model)
    result = group_linear(grouped, adapter, dense_record(grouped, adapter), groups=4, modules=["qkv"])
    reference = _masked_dense(model, result, ["qkv"])
    batch = tiny_batch()
    for _ in range(2):  # twice: nothing of the first pass may leak into the second
        with torch.no_grad():
            torch.testing.assert_close(grouped(**batch).last_hidden_state, reference(**batch).last_hidden_state,
                                       atol=1e-5, rtol=1e-5)
    out = grouped(**batch).last_hidden_state  # with autograd: the training forward path
    torch.testing.assert_close(out, reference(**batch).last_hidden_state, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    query = adapter.submodule(adapter.layers(grouped)[0], adapter.paths_for_layer(adapter.layers(grouped)[0]).query)
    assert query.weight.grad is not None and query.weight.grad.abs().sum() > 0
