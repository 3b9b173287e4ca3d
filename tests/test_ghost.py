"""Ghost modules: reference values, parameter/FLOP formulas, padding invariance, the function right
after attaching, exact save -> load, gradients, training only the ghosts, on every family."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ghostify import load_model, save_checkpoint
from ghostify.architectures import get_adapter
from ghostify.checkpoint import model_record
from ghostify.errors import GhostifyError
from ghostify.flops import count_flops
from ghostify.methods.ghost import (
    GhostContext,
    GhostConv,
    GhostLinear,
    GhostMapConv,
    GhostSettings,
    attach_ghosts,
    freeze_except_ghosts,
    ghost_flops,
    ghost_parameter_names,
    ghost_params,
    ghost_record,
    has_ghosts,
)
from ghostify.methods.pruning import magnitude_importance
from ghostify.methods.pruning.apply import dense_record, prune
from ghostify.testing import HEADS, HIDDEN, tiny_batch, tiny_model

from .conftest import ALL_FAMILIES, SDPA_FAMILIES

HEAD_SIZE = HIDDEN // HEADS


def _pruned(family: str, head: str = "base", heads: Fraction = Fraction(2, 4), ffn: Fraction = Fraction(1, 3)):
    model = tiny_model(family, head)
    adapter = get_adapter(model.config)
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter), heads_width=heads, ffn_width=ffn)
    return model, record


def _ghosted(model, record, settings: GhostSettings, *, randomise: bool = True):
    attach_ghosts(model, settings)
    record.methods["ghost"] = ghost_record(model, settings)
    if randomise:  # trained-looking ghosts: a test must not pass because the kernels are uniform
        params = dict(model.named_parameters())
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name in ghost_parameter_names(model):
                params[name].copy_(torch.randn(params[name].shape, generator=generator))
    return model, record


def _main_output(out):
    for name in ("logits", "start_logits", "last_hidden_state"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise AssertionError("no output")


# ----------------------------------------------------------------------------------------------
# the module itself: a hand-computed reference
# ----------------------------------------------------------------------------------------------
def _reference_conv() -> GhostConv:
    conv = GhostConv(2, kernel_size=3)
    with torch.no_grad():
        conv.weight.zero_()  # channel 0: softmax of zeros -> (1/3, 1/3, 1/3)
        conv.weight[0, 0, 0, 1] = torch.log(torch.tensor([1.0, 2.0, 5.0]))  # channel 1: (1/8, 2/8, 5/8)
    return conv


def test_softmax_depthwise_conv_hand_computed():
    # channel 0, weights 1/3, zero beyond the ends:  (0+3-6)/3=-1, (3-6+9)/3=2, (-6+9+0)/3=1, (9+0+0)/3=3
    # channel 1, out[t] = y[t-1]/8 + 2 y[t]/8 + 5 y[t+1]/8 (cross-correlation, as torch convolutions):
    #   t0: 0 + 2*8/8 + 5*0/8 = 2;  t1: 8/8 + 0 - 40/8 = -4;  t2: 0 - 16/8 + 80/8 = 8;  t3: -8/8 + 32/8 + 0 = 3
    y = torch.tensor([[[3.0, 8.0], [-6.0, 0.0], [9.0, -8.0], [0.0, 16.0]]])  # (batch 1, seq 4, channels 2)
    ghost = _reference_conv()(y[:, :, None, :])[:, :, 0, :]
    expected_ghost = torch.tensor([[[0.0, 2.0], [2.0, 0.0], [1.0, 8.0], [3.0, 3.0]]])  # after ReLU
    torch.testing.assert_close(ghost, expected_ghost)

    # the same through a projection (identity weights): out = y + ReLU(DWConv(y, softmax(W)))
    base = torch.nn.Linear(2, 2)
    with torch.no_grad():
        base.weight.copy_(torch.eye(2))
        base.bias.zero_()
    context = GhostContext(mask_index=None)
    layer = GhostLinear(base, context, _reference_conv())
    expected = torch.tensor([[[3.0, 10.0], [-4.0, 0.0], [10.0, 0.0], [3.0, 19.0]]])
    torch.testing.assert_close(layer(y), expected)

    # padded: the first 3 tokens of a longer, padded row give what those 3 tokens alone give
    padded = torch.cat([y[:, :3], torch.full((1, 2, 2), 100.0)], dim=1)
    context.set_mask(torch.tensor([[1, 1, 1, 0, 0]]))
    alone = GhostLinear(base, GhostContext(None), _reference_conv())(y[:, :3])
    torch.testing.assert_close(layer(padded)[:, :3], alone)
    # t2 of channel 0 alone: (-6 + 9 + 0)/3 = 1 -> 9 + 1 = 10; channel 1: -16/8 + 0 = -2 -> ReLU 0 -> -8
    torch.testing.assert_close(alone[0, 2], torch.tensor([10.0, -8.0]))


def test_no_softmax_and_no_relu_reference():
    conv = GhostConv(1, kernel_size=3, softmax=False, relu=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([1.0, -2.0, 3.0]).view(1, 1, 1, 1, 3))
    y = torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1)
    # t0: 0*1 - 2*1 + 3*2 = 4;  t1: 1 - 4 + 9 = 6;  t2: 2 - 6 + 0 = -4 (kept: no ReLU)
    torch.testing.assert_close(conv(y).flatten(), torch.tensor([4.0, 6.0, -4.0]))


# ----------------------------------------------------------------------------------------------
# parameter and FLOP formulas
# ----------------------------------------------------------------------------------------------
def _per_layer_formula(s: GhostSettings, *, d: int, d_ff: int, kept: int, heads: int, head_size: int) -> int:
    """The ghost parameters of one layer, written out per variant."""
    k, f = s.kernel_size, s.features
    parts = kept if s.per_head else 1

    def kernel(channels: int) -> int:  # one kernel's weights, by convolution type
        return {"dwconv": channels * k, "conv1d-seq": channels * channels * k, "conv1d-feature": k, "conv2d": k * k}[s.conv]

    total = 0
    if "o" in s.positions:
        total += f * parts * kernel(d)
    if "ffn2" in s.positions:
        total += f * parts * kernel(d)
    if "ffn1" in s.positions:
        total += f * kernel(d_ff)
    if "v" in s.positions and heads > kept:
        ghosts = heads - kept
        total += ghosts * f * parts * kernel(head_size) + d * ghosts * head_size  # kernels + new O columns
    if "qk" in s.positions:
        total += (kept if s.per_head else 1) * f * k * k
    return total


VARIANTS = [
    GhostSettings(),
    GhostSettings(kernel_size=1),
    GhostSettings(kernel_size=5, softmax=False),
    GhostSettings(kernel_size=9, relu=False),
    GhostSettings(kernel_size=17),
    GhostSettings(features=3),
    GhostSettings(per_head=True),
    GhostSettings(per_head=True, features=2),
    GhostSettings(conv="conv1d-seq"),
    GhostSettings(conv="conv1d-feature", per_head=True),
    GhostSettings(conv="conv2d", features=2),
    GhostSettings(positions="o,ffn2,ffn1"),
    GhostSettings(positions="ffn1", conv="conv2d"),
    GhostSettings(positions="v"),
    GhostSettings(positions="v,o", per_head=True, features=2),
    GhostSettings(positions="qk"),
    GhostSettings(positions="qk,o", per_head=True, features=2, conv="conv2d"),
]


@pytest.mark.parametrize("settings", VARIANTS, ids=lambda s: s.describe().replace(" ", "_"))
def test_parameter_formula_of_every_variant(settings):
    model, record = _pruned("bert")
    attach_ghosts(model, settings)
    kept, d_ff = record.heads_per_layer, record.ffn
    expected = sum(
        _per_layer_formula(settings, d=HIDDEN, d_ff=n, kept=m, heads=HEADS, head_size=HEAD_SIZE) for m, n in zip(kept, d_ff)
    )
    assert ghost_params(model) == expected
    assert ghost_params(model) == sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in _pruned("bert")[0].parameters())


def test_per_head_formula_is_2_L_M_F_d_k():
    model, record = _pruned("bert", heads=Fraction(3, 4))
    attach_ghosts(model, GhostSettings(per_head=True, features=2, kernel_size=5))
    layers, m = len(record.heads), 3
    assert ghost_params(model) == 2 * layers * m * 2 * HIDDEN * 5


def test_bert_base_defaults_add_55296_params_and_14_2m_flops():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).eval()
    before_params = sum(p.numel() for p in model.parameters())
    before_flops = count_flops(model, seq_len=128)
    attach_ghosts(model, GhostSettings())
    assert ghost_params(model) == 2 * 12 * 768 * 3 == 55_296
    assert sum(p.numel() for p in model.parameters()) - before_params == 55_296
    with FlopCounterMode(display=False) as counter:
        after_flops = count_flops(model, seq_len=128)
    assert ghost_flops(counter.get_flop_counts()) == 4 * 12 * 128 * 768 * 3 == 14_155_776  # 14.2M
    assert after_flops - before_flops == 14_155_776


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("pruned", [False, True], ids=["dense", "pruned"])
def test_defaults_add_2_L_d_k_params_and_4_L_n_d_k_flops(family, pruned):
    model, _record = _pruned(family) if pruned else (tiny_model(family), None)
    adapter = get_adapter(model.config)
    layers = len(adapter.layers(model))
    applications = sum(adapter.layer_applications(model))  # ALBERT runs its shared layer 3 times
    before = count_flops(model, seq_len=16)
    attach_ghosts(model, GhostSettings())
    assert ghost_params(model) == 2 * layers * HIDDEN * 3
    with FlopCounterMode(display=False) as counter:
        after = count_flops(model, seq_len=16)
    assert ghost_flops(counter.get_flop_counts()) == after - before == 4 * applications * 16 * HIDDEN * 3


def test_ghost_flops_of_attention_positions():
    """qk: a k x k Conv2D over each kept head's n x n map (2 n^2 k^2 per map and feature); v: the
    value kernels, the mixing by the mean attention map and the new output-projection columns."""
    model, record = _pruned("bert")
    n, k, f = 16, 3, 2
    attach_ghosts(model, GhostSettings(positions="qk,v", features=f))
    with FlopCounterMode(display=False) as counter:
        count_flops(model, seq_len=n)
    kept, ghosts, hs = 2, HEADS - 2, HEAD_SIZE
    qk = 2 * kept * f * n * n * k * k
    v = 2 * n * ghosts * f * hs * k + 2 * n * n * ghosts * hs + 2 * n * ghosts * hs * HIDDEN
    assert ghost_flops(counter.get_flop_counts()) == len(record.heads) * (qk + v)


# ----------------------------------------------------------------------------------------------
# padding never leaks
# ----------------------------------------------------------------------------------------------
def _assert_padding_invariant(model, *, left: bool, atol: float = 1e-5):
    batch = tiny_batch(3, 9)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if left:  # move every row's real tokens to the end
        length = ids.shape[1]
        shifted_ids, shifted_mask = torch.zeros_like(ids), torch.zeros_like(mask)
        for i in range(ids.shape[0]):
            n = int(mask[i].sum())
            shifted_ids[i, length - n :], shifted_mask[i, length - n :] = ids[i, :n], 1
        ids, mask = shifted_ids, shifted_mask
    # explicit positions: the same for a sequence whether it is padded (left or right) or alone
    positions = (mask.cumsum(1) - 1).clamp(min=0) + 2
    together = model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    for i in range(ids.shape[0]):
        real = mask[i].bool()
        n = int(real.sum())
        alone = model(input_ids=ids[i : i + 1, real], attention_mask=torch.ones(1, n, dtype=torch.long),
                      position_ids=torch.arange(n)[None] + 2).last_hidden_state[0]
        torch.testing.assert_close(together[i, real], alone, atol=atol, rtol=1e-5)


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_padding_does_not_leak_default(family, left):
    model, _record = _ghosted(*_pruned(family), GhostSettings())
    _assert_padding_invariant(model, left=left)


@pytest.mark.parametrize(
    "settings",
    [
        GhostSettings(per_head=True, features=2),
        GhostSettings(conv="conv1d-seq", positions="o,ffn1,ffn2"),
        GhostSettings(conv="conv2d", per_head=True),
        GhostSettings(conv="conv1d-feature"),
        GhostSettings(positions="qk,v", per_head=True, softmax=False, kernel_size=5),
        GhostSettings(positions="qk,v,o", features=2),
    ],
    ids=lambda s: s.describe().replace(" ", "_"),
)
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_padding_does_not_leak_variants(settings, left):
    model, _ = _ghosted(*_pruned("bert"), settings)
    _assert_padding_invariant(model, left=left)


def test_padding_test_would_catch_a_leak(monkeypatch):
    """Without the mask the same check fails: the invariance above is not vacuous."""
    model, _ = _ghosted(*_pruned("bert"), GhostSettings())
    monkeypatch.setattr(GhostContext, "keep", lambda self, x, batch, length: None)
    with pytest.raises(AssertionError):
        _assert_padding_invariant(model, left=False)


# ----------------------------------------------------------------------------------------------
# what the model computes right after attaching (the statement in the help and README)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_right_after_attaching_each_module_adds_relu_of_the_k_token_mean(family):
    """Every ghosted projection returns y + ReLU(mean of y over the k tokens centred on each token),
    zeros beyond the sequence ends and at padded tokens (checked against avg_pool1d)."""
    model, _ = _pruned(family)
    k = 5
    attach_ghosts(model, GhostSettings(kernel_size=k, positions="o,ffn1,ffn2"))
    batch = tiny_batch()
    keep = batch["attention_mask"][:, :, None].float()
    seen = []

    def check(module, args, output):
        y = F.linear(args[0], module.weight, module.bias)
        mean = F.avg_pool1d((y * keep).transpose(1, 2), k, stride=1, padding=k // 2, count_include_pad=True).transpose(1, 2)
        torch.testing.assert_close(output, y + mean.relu(), atol=1e-5, rtol=1e-5)
        seen.append(module)

    for module in model.modules():
        if isinstance(module, GhostLinear):
            module.register_forward_hook(check)
    model(**batch)
    assert len(seen) == 3 * sum(get_adapter(model.config).layer_applications(model))


def test_no_softmax_starts_from_the_same_function():
    batch = tiny_batch()
    outs = []
    for softmax in (True, False):
        model, _ = _pruned("bert")
        attach_ghosts(model, GhostSettings(softmax=softmax, features=3, per_head=True))
        outs.append(model(**batch).last_hidden_state)
    torch.testing.assert_close(outs[0], outs[1])


@pytest.mark.parametrize("family", SDPA_FAMILIES)
def test_v_starts_as_a_no_op(family):
    model, _ = _pruned(family)
    batch = tiny_batch()
    before = model(**batch).last_hidden_state
    attach_ghosts(model, GhostSettings(positions="v", features=2))
    # real tokens: a padded query row whose window holds only padding (ModernBERT's sliding
    # layers) is undefined, and SDPA and the eager kernel fill it differently
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(model(**batch).last_hidden_state[real], before[real], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# --init: the paper's uniform start, and two starts closer to what the model computed
# ----------------------------------------------------------------------------------------------
def test_center_init_kernels_hand_computed():
    """init center: the first kernel holds 0.9 on its centre tap, the other taps share 0.1."""
    conv = GhostConv(2, kernel_size=3, init="center")
    torch.testing.assert_close(conv.kernel()[0, 0, 0], torch.tensor([[0.05, 0.9, 0.05]] * 2))
    k5 = GhostConv(1, kernel_size=5, init="center", softmax=False)  # no softmax: the same weights
    torch.testing.assert_close(k5.weight[0, 0, 0, 0], torch.tensor([0.025, 0.025, 0.9, 0.025, 0.025]))
    assert GhostConv(3, kernel_size=1, init="center").kernel().eq(1).all()  # one tap: nothing to peak
    square = GhostConv(2, kernel_size=3, conv="conv2d", init="center").kernel()[0, 0, 0]
    expected = torch.full((3, 3), 0.1 / 8)
    expected[1, 1] = 0.9
    torch.testing.assert_close(square, expected)
    # a channel-mixing 1-D conv peaks on each channel's own input at the middle token
    mixing = GhostConv(3, kernel_size=3, conv="conv1d-seq", init="center").kernel()[0, 0, 0].detach()  # (out, in, k)
    for c in range(3):
        assert float(mixing[c, c, 1]) == pytest.approx(0.9) and float(mixing[c].sum()) == pytest.approx(1.0)
    maps = GhostMapConv(1, kernel_size=3, init="center").kernel()[0, 0]
    torch.testing.assert_close(maps, expected)


def test_center_init_starts_close_to_y_plus_relu_y():
    """A centred module computes y + ReLU(0.9 y + 0.05 (neighbours)): checked on one projection."""
    model, _ = _pruned("bert")
    attach_ghosts(model, GhostSettings(init="center"))
    batch = tiny_batch()
    keep = batch["attention_mask"][:, :, None].float()
    seen = []

    def check(module, args, output):
        y = F.linear(args[0], module.weight, module.bias) * keep
        neighbours = F.pad(y, (0, 0, 1, 0))[:, :-1] + F.pad(y, (0, 0, 0, 1))[:, 1:]
        torch.testing.assert_close(output * keep, (y + (0.9 * y + 0.05 * neighbours).relu()) * keep, atol=1e-5, rtol=1e-5)
        seen.append(module)

    for module in model.modules():
        if isinstance(module, GhostLinear):
            module.register_forward_hook(check)
    model(**batch)
    assert len(seen) == 4


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_zero_scale_starts_as_the_model_without_ghosts(family):
    model, _ = _pruned(family, "sequence-classification")
    model.eval()
    batch = tiny_batch()
    before = model(**batch).logits
    positions = "qk,v,o,ffn1,ffn2" if get_adapter(model.config).uses_attention_interface else "o,ffn1,ffn2"
    attach_ghosts(model, GhostSettings(init="zero-scale", positions=positions, features=2))
    scales = [n for n in ghost_parameter_names(model) if n.endswith(".scale")]
    assert scales and all(dict(model.named_parameters())[n].eq(0).all() for n in scales)
    assert not any("ghost_v" in n for n in scales)  # v's output columns already start at zero
    torch.testing.assert_close(model(**batch).logits, before, atol=1e-6, rtol=1e-6)


def test_zero_scale_learns_its_scale_and_then_its_kernels():
    model, _ = _pruned("bert", "sequence-classification")
    attach_ghosts(model, GhostSettings(init="zero-scale"))
    model.train()
    params = dict(model.named_parameters())
    names = ghost_parameter_names(model)
    model(**tiny_batch(), labels=torch.tensor([0, 1, 1])).loss.backward()
    assert all(params[n].grad.abs().sum() > 0 for n in names if n.endswith(".scale"))
    assert all(params[n].grad.abs().sum() == 0 for n in names if n.endswith(".weight"))  # behind a zero scale
    with torch.no_grad():
        for n in names:
            if n.endswith(".scale"):
                params[n].fill_(0.1)
    model.zero_grad()
    model(**tiny_batch(), labels=torch.tensor([0, 1, 1])).loss.backward()
    assert all(params[n].grad.abs().sum() > 0 for n in names)


@pytest.mark.parametrize("init", ["center", "zero-scale"])
def test_save_load_is_exact_with_each_init(init, tmp_path):
    settings = GhostSettings(init=init, positions="qk,v,o,ffn1,ffn2")
    model, record = _ghosted(*_pruned("bert", "sequence-classification"), settings)  # random scales and kernels
    batch = tiny_batch()
    before = model(**batch).logits
    save_checkpoint(model, tmp_path / "ghost", record)
    loaded = load_model(tmp_path / "ghost")
    assert model_record(loaded).methods["ghost"]["settings"]["init"] == init
    assert torch.equal(loaded(**batch).logits, before)
    assert loaded.state_dict().keys() == model.state_dict().keys()


def test_features_and_ghost_heads_start_different():
    """Identical kernels would get identical gradients forever; extra features start apart."""
    model, _ = _pruned("bert")
    attach_ghosts(model, GhostSettings(positions="v,o", features=3))
    dense = model.encoder.layer[0].attention.output.dense.ghost.weight  # (1, F, 1, d, k)
    assert torch.all(dense[0, 0] == 0) and not torch.equal(dense[0, 1], dense[0, 2])
    value = model.encoder.layer[0].attention.self.ghost_v.conv.weight  # (N_H - M, F, 1, head_size, k)
    assert not torch.equal(value[0, 0], value[1, 0])


@pytest.mark.parametrize("pruned", [False, True], ids=["dense-uneven-folds", "pruned"])
def test_per_head_with_equal_kernels_is_the_shared_module(pruned):
    """Per-head splits the projection into M head (or FFN-fold) contributions that sum to it, the
    bias shared equally; with every head's kernel equal it is the shared module. The dense tiny
    FFN (37 neurons, 4 folds) checks uneven folds."""
    batch = tiny_batch()
    shared = _pruned("bert")[0] if pruned else tiny_model("bert")
    per_head = _pruned("bert")[0] if pruned else tiny_model("bert")
    attach_ghosts(shared, GhostSettings(features=2))
    attach_ghosts(per_head, GhostSettings(features=2, per_head=True))
    heads = dict(per_head.named_parameters())
    with torch.no_grad():
        for name, param in shared.named_parameters():
            if name in ghost_parameter_names(shared):
                param.normal_()
                heads[name].copy_(param.expand_as(heads[name]))
    torch.testing.assert_close(per_head(**batch).last_hidden_state, shared(**batch).last_hidden_state)


# ----------------------------------------------------------------------------------------------
# save -> load, gradients, training only the ghosts
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("pruned", [False, True], ids=["dense", "pruned"])
def test_save_load_is_exact(family, pruned, tmp_path):
    if pruned:
        model, record = _pruned(family, "sequence-classification")
    else:
        model = tiny_model(family, "sequence-classification")
        record = dense_record(model, get_adapter(model.config))
    settings = GhostSettings(positions="o,ffn1,ffn2", features=2, per_head=False)
    model, record = _ghosted(model, record, settings)
    batch = tiny_batch()
    before = model(**batch).logits
    save_checkpoint(model, tmp_path / "ghost", record)
    loaded = load_model(tmp_path / "ghost")
    assert type(loaded) is type(model)
    assert model_record(loaded).methods["ghost"]["settings"] == settings.to_dict()
    assert torch.equal(loaded(**batch).logits, before)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("family", ["bert", "distilbert", "albert"])
@pytest.mark.parametrize(
    "settings",
    [GhostSettings(positions="qk,v,o,ffn2", per_head=True, features=2), GhostSettings(positions="qk,v,ffn1", conv="conv2d")],
    ids=["all-positions-per-head", "attention-positions"],
)
def test_save_load_is_exact_attention_positions(family, settings, tmp_path):
    model, record = _ghosted(*_pruned(family, "masked-lm"), settings)
    batch = tiny_batch()
    before = model(**batch).logits
    save_checkpoint(model, tmp_path / "ghost", record)
    loaded = load_model(tmp_path / "ghost")
    assert torch.equal(loaded(**batch).logits, before)
    # the ghosted attention keeps running when the model switches implementation (info counts FLOPs in eager)
    loaded.set_attn_implementation("eager")
    torch.testing.assert_close(loaded(**batch).logits, before)


def test_load_refuses_a_record_that_does_not_match_the_weights(tmp_path):
    from ghostify.errors import CheckpointError

    import json

    model, record = _ghosted(*_pruned("bert"), GhostSettings())
    save_checkpoint(model, tmp_path / "bad", record)
    config = json.loads((tmp_path / "bad" / "config.json").read_text())
    config["ghostify"]["methods"]["ghost"]["settings"]["kernel_size"] = 5  # edited by hand after saving
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="do not match"):
        load_model(tmp_path / "bad")
    # saving such a record is refused in the first place (the model card loads the checkpoint back)
    record.methods["ghost"]["settings"]["kernel_size"] = 5
    with pytest.raises(CheckpointError, match="do not match"):
        save_checkpoint(model, tmp_path / "bad-too", record)
    assert not (tmp_path / "bad-too").exists() and [p.name for p in tmp_path.iterdir()] == ["bad"]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_gradients_reach_every_ghost_parameter(family):
    model, _ = _pruned(family, "sequence-classification")
    attach_ghosts(model, GhostSettings(features=2, positions="o,ffn1,ffn2"))
    model.train()
    out = model(**tiny_batch(), labels=torch.tensor([0, 1, 1]))
    out.loss.backward()
    for name in ghost_parameter_names(model):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_training_recomputes_the_ghost_exactly():
    """In training the ghost branch is recomputed in backward (to keep one activation per module):
    outputs and gradients equal plain autograd through y + ReLU(DWConv(y))."""
    torch.manual_seed(0)
    base = torch.nn.Linear(8, 8)
    layer = GhostLinear(base, GhostContext(None), GhostConv(8, kernel_size=3))
    with torch.no_grad():
        layer.ghost.weight.normal_()
    x = torch.randn(2, 5, 8, requires_grad=True)
    out = layer(x)
    out.square().sum().backward()
    grads = [t.grad.clone() for t in (x, base.weight, base.bias, layer.ghost.weight)]
    for t in (x, base.weight, base.bias, layer.ghost.weight):
        t.grad = None
    y = base(x)
    plain = y + layer.ghost(y[:, :, None, :])[:, :, 0, :]
    plain.square().sum().backward()
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    for expected, t in zip(grads, (x, base.weight, base.bias, layer.ghost.weight)):
        torch.testing.assert_close(t.grad, expected, rtol=0, atol=0)


def test_gradients_reach_attention_position_ghosts():
    model, _ = _pruned("bert", "sequence-classification")
    attach_ghosts(model, GhostSettings(positions="qk,v,o", per_head=True))
    params = dict(model.named_parameters())
    with torch.no_grad():  # ghost-head columns start at zero, which blocks the value kernels' gradient at first
        for name in ghost_parameter_names(model):
            if name.endswith("ghost_heads.weight"):
                params[name].normal_()
    model.train()
    model(**tiny_batch(), labels=torch.tensor([0, 1, 1])).loss.backward()
    for name in ghost_parameter_names(model):
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0, name


def test_inference_kernel_cache_follows_weight_updates():
    """The softmax kernel is cached without autograd; an in-place update must invalidate it, and
    a kernel cached under inference_mode must not break training afterwards."""
    model, _ = _pruned("bert", "sequence-classification")
    attach_ghosts(model, GhostSettings())
    batch = tiny_batch()
    with torch.inference_mode():
        model(**batch)
    ghost = model.bert.encoder.layer[0].attention.output.dense.ghost
    with torch.no_grad():
        before = model(**batch).logits
        ghost.weight.add_(torch.randn_like(ghost.weight))
        after = model(**batch).logits
    assert not torch.allclose(before, after)
    fresh = copy.deepcopy(model)
    fresh.bert.encoder.layer[0].attention.output.dense.ghost.__dict__.pop("_kernel_cache", None)
    with torch.no_grad():
        torch.testing.assert_close(fresh(**batch).logits, after)
    ghost.weight.requires_grad_(False)  # frozen ghosts, trained base: the cached kernel is not reused
    model.train()
    model(**batch, labels=torch.tensor([0, 1, 1])).loss.backward()


def test_train_only_the_ghosts(tmp_path):
    model, record = _ghosted(*_pruned("roberta", "sequence-classification"), GhostSettings(), randomise=False)
    # the record says which parameters are new (relative to the encoder, as in a bare checkpoint)
    prefix = model.base_model_prefix + "."
    assert sorted(prefix + n for n in record.methods["ghost"]["parameters"]) == sorted(ghost_parameter_names(model))
    assert record.methods["ghost"]["params"] == ghost_params(model)
    trainable = freeze_except_ghosts(model)
    assert trainable == sorted(ghost_parameter_names(model))
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(trainable)
    model.train()
    model(**tiny_batch(), labels=torch.tensor([0, 1, 1])).loss.backward()
    assert {n for n, p in model.named_parameters() if p.grad is not None} == set(trainable)
    with pytest.raises(GhostifyError, match="no ghost modules"):
        freeze_except_ghosts(tiny_model("bert"))


# ----------------------------------------------------------------------------------------------
# injection: checked before anything changes
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "family, settings, message",
    [
        ("bert", GhostSettings(positions="v"), "keeps all 4 heads"),
        ("deberta-v2", GhostSettings(positions="o,qk"), "AttentionInterface"),
        ("mpnet", GhostSettings(positions="v"), "AttentionInterface"),
    ],
)
def test_refused_settings_leave_the_model_untouched(family, settings, message):
    model = tiny_model(family)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modules = [type(m) for m in model.modules()]
    with pytest.raises(GhostifyError, match=message):
        attach_ghosts(model, settings)
    assert not has_ghosts(model) and [type(m) for m in model.modules()] == modules
    assert not model.base_model._forward_pre_hooks
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_attaching_twice_is_refused():
    model = tiny_model("bert")
    attach_ghosts(model, GhostSettings())
    with pytest.raises(GhostifyError, match="already has ghost modules"):
        attach_ghosts(model, GhostSettings(positions="ffn1"))


def test_ghost_projections_are_still_linears():
    """Code that reads a projection's weights (gates, counting) keeps working, and the base weights
    keep their state-dict keys."""
    model = tiny_model("bert")
    keys = set(model.state_dict())
    attach_ghosts(model, GhostSettings())
    dense = model.encoder.layer[0].attention.output.dense
    assert isinstance(dense, torch.nn.Linear) and dense.in_features == HIDDEN
    assert keys < set(model.state_dict())


def test_prune_refuses_a_ghosted_model():
    model = tiny_model("bert")
    adapter = get_adapter(model.config)
    model, record = _ghosted(model, dense_record(model, adapter), GhostSettings())
    with pytest.raises(GhostifyError, match="ghost"):
        prune(model, record, magnitude_importance(model, adapter), heads_width=Fraction(1, 2), ffn_width=Fraction(1, 2))


def test_deepcopy_gets_its_own_mask_context():
    model, _ = _ghosted(*_pruned("bert"), GhostSettings())
    twin = copy.deepcopy(model)
    context = twin.base_model._ghostify_ghost_context
    assert context is not model.base_model._ghostify_ghost_context
    assert all(m.context is context for m in twin.modules() if isinstance(m, GhostLinear))
    batch = tiny_batch()
    torch.testing.assert_close(twin(**batch).last_hidden_state, model(**batch).last_hidden_state)


# ----------------------------------------------------------------------------------------------
# settings validation: one line, the value, the fix
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kernel_size": 4}, "even"),
        ({"kernel_size": 0}, "positive"),
        ({"features": 0}, "--features 0"),
        ({"conv": "lstm"}, "unknown --conv 'lstm'"),
        ({"positions": "o,attn"}, "unknown --positions attn"),
        ({"positions": "o,o"}, "twice"),
        ({"positions": ""}, "empty"),
        ({"per_head": True, "positions": "ffn1"}, "--per-head does not apply to position ffn1"),
        ({"positions": "qk", "conv": "conv1d-seq"}, "cannot act on attention maps"),
        ({"features": 2, "kernel_size": 1}, "identical features"),
        ({"init": "xavier"}, "unknown --init 'xavier'.*uniform"),
    ],
)
def test_invalid_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(GhostifyError, match=message) as info:
        GhostSettings(**kwargs)
    assert "\n" not in str(info.value)


def test_settings_round_trip_and_refuse_unknown_keys():
    settings = GhostSettings(kernel_size=5, positions=["ffn2", "o", "qk"], per_head=True)
    assert settings.positions == ("qk", "o", "ffn2")
    assert GhostSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(GhostifyError, match="unknown ghost setting"):
        GhostSettings.from_dict({**settings.to_dict(), "kernel": 3})
    assert GhostSettings().describe() == "dwconv k=3 softmax relu F=1 shared at o,ffn2"
    assert GhostSettings(init="center").describe() == "dwconv k=3 softmax relu F=1 shared init=center at o,ffn2"
    assert GhostSettings.from_dict({k: v for k, v in settings.to_dict().items() if k != "init"}).init == "uniform"
