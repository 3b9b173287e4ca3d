"""The ghost convolution kinds (``ghostify.methods.ghost.convs``): each kind's output against a
reference written plainly here (hand-computed numbers, then loops), the padding-mask rule, and the
weight shape each registry entry states against what a checkpoint's record restores."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from ghostify import load_model, save_checkpoint
from ghostify.architectures import get_adapter
from ghostify.methods.ghost import GhostConv, GhostSettings, attach_ghosts, ghost_record
from ghostify.methods.ghost.convs import EAGER, GRAPH, KINDS, ONNX
from ghostify.methods.ghost.settings import CONV_HELP, CONVS
from ghostify.methods.pruning import magnitude_importance
from ghostify.methods.pruning.apply import dense_record, prune
from ghostify.testing import tiny_batch, tiny_model

FORMS = [EAGER, GRAPH, ONNX]  # every form runs eagerly too (ONNX: the grouped Conv the export writes)

#: one sequence of 4 tokens with 2 channels: (batch 1, seq 4, parts 1, channels 2)
X = torch.tensor([[1.0, -2.0], [3.0, 0.0], [-1.0, 4.0], [2.0, 1.0]]).view(1, 4, 1, 2)

# (kind, its one kernel (k = 3) as (1, 1, 1, *kernel), the output without ReLU, worked by hand below)
HAND = [
    # dwconv: out[t, c] = sum_j x[t + j - 1, c] * w[c, j]; channel 0 slides [1, 2, 3], channel 1 [0, -1, 1]
    # e.g. out[0, 0] = 0*1 + 1*2 + 3*3 = 11, out[2, 1] = 0*0 + 4*(-1) + 1*1 = -3
    ("dwconv", [[1.0, 2.0, 3.0], [0.0, -1.0, 1.0]], [[11.0, 2.0], [4.0, 4.0], [7.0, -3.0], [3.0, -1.0]]),
    # conv1d-seq: w[out, in, j]; output 0 = channel 0 of the previous token + channel 1 of this one,
    # output 1 = -(channel 0 of the next token) + the window sum of channel 1
    # e.g. out[1, 1] = -(-1) + (-2 + 0 + 4) = 3
    ("conv1d-seq", [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 0.0, -1.0], [1.0, 1.0, 1.0]]],
     [[-2.0, -5.0], [1.0, 3.0], [7.0, 3.0], [0.0, 5.0]]),
    # conv1d-feature: each token's 2 features slide [1, 2, 3]: out[t, c] = sum_j x[t, c + j - 1] * w[j]
    # e.g. token 0 = [1, -2]: out[0, 0] = 0*1 + 1*2 + (-2)*3 = -4, out[0, 1] = 1*1 + (-2)*2 + 0*3 = -3
    ("conv1d-feature", [1.0, 2.0, 3.0], [[-4.0, -3.0], [6.0, 3.0], [10.0, 7.0], [7.0, 4.0]]),
    # conv2d over the (sequence, feature) plane: out[t, c] = x[t - 1, c] + 2 x[t, c] - x[t + 1, c + 1]
    # e.g. out[1, 0] = 1 + 2*3 - 4 = 3, out[2, 1] = 0 + 2*4 - 0 = 8
    ("conv2d", [[0.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0]], [[2.0, -4.0], [3.0, -2.0], [0.0, 8.0], [3.0, 6.0]]),
]


def test_the_registry_is_the_settings_list():
    """``--conv`` names and help (settings, torch-free) and the kinds name the same four, in order."""
    assert list(KINDS) == list(CONVS) == list(CONV_HELP)
    assert all(kind.name == name for name, kind in KINDS.items())


def test_what_each_kind_states():
    """Kernel dims (what a softmax normalises together), mask rule and --init center's tap."""
    assert {n: k.kernel_dims for n, k in KINDS.items()} == {"dwconv": 1, "conv1d-seq": 2, "conv1d-feature": 1, "conv2d": 2}
    assert [n for n, k in KINDS.items() if not k.masks_padding] == ["conv1d-feature"]  # the one that never mixes tokens
    assert {n: k.centre(5) for n, k in KINDS.items()} == {
        "dwconv": (2,), "conv1d-seq": ("diagonal", 2), "conv1d-feature": (2,), "conv2d": (2, 2)}


@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name,kernel,expected", HAND, ids=[h[0] for h in HAND])
def test_each_kind_matches_the_hand_computed_output(name, kernel, expected, form, relu):
    w = torch.tensor(kernel).view(KINDS[name].weight_shape((1, 1, 1), 2, 3))
    expected = torch.tensor(expected).view(1, 4, 1, 2)
    expected = expected.clamp(min=0) if relu else expected
    got = KINDS[name].forward(X.clone(), w, relu=relu, form=form).reshape(1, 4, 1, 2)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # and through the module, with a residual, as a ghost projection runs it
    module = GhostConv(2, conv=name, softmax=False, relu=relu).eval()
    with torch.no_grad():
        module.weight.copy_(w)
        residual = torch.arange(8.0).view(1, 4, 2)
        torch.testing.assert_close(module(X.clone(), None, residual.clone()), residual + expected.view(1, 4, 2), rtol=0, atol=0)


# ---- a plain reference for any geometry: out[q] = sum_f act( sum_p Conv(x[p], w[q, f, p]) ) * scale[q] ----
def _at(x: torch.Tensor, t: int, c: int) -> float:
    """x[t, c] of one (seq, channels) slice, zero outside it (the convolution's zero padding)."""
    return float(x[t, c]) if 0 <= t < x.shape[0] and 0 <= c < x.shape[1] else 0.0


def _plain_conv(name: str, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One part's convolution, (seq, C) with one kernel -> (seq, C), by loops."""
    length, channels = x.shape
    k = w.shape[-1]
    pad = k // 2
    out = torch.zeros(length, channels)
    for t in range(length):
        for c in range(channels):
            if name == "dwconv":
                value = sum(_at(x, t + j - pad, c) * float(w[c, j]) for j in range(k))
            elif name == "conv1d-seq":
                value = sum(_at(x, t + j - pad, i) * float(w[c, i, j]) for i in range(channels) for j in range(k))
            elif name == "conv1d-feature":
                value = sum(_at(x, t, c + j - pad) * float(w[j]) for j in range(k))
            else:
                value = sum(_at(x, t + i - pad, c + j - pad) * float(w[i, j]) for i in range(k) for j in range(k))
            out[t, c] = value
    return out


def _plain_ghosts(name: str, x: torch.Tensor, w: torch.Tensor, relu: bool, scale: torch.Tensor | None) -> torch.Tensor:
    batch, length, parts, channels = x.shape
    outputs, features = w.shape[:2]
    out = torch.zeros(batch, length, outputs, channels)
    for b in range(batch):
        for q in range(outputs):
            for f in range(features):
                conv = sum(_plain_conv(name, x[b, :, p], w[q, f, p]) for p in range(parts))
                out[b, :, q] += conv.clamp(min=0) if relu else conv
    return out * scale if scale is not None else out


GEOMETRIES = [  # (id, GhostConv keyword arguments)
    ("parts-features", {"parts": 2, "features": 2}),
    ("outputs-k5", {"outputs": 2, "kernel_size": 5, "relu": False}),
    ("all-scaled", {"parts": 2, "outputs": 2, "features": 2, "init": "zero-scale"}),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kwargs", [g[1] for g in GEOMETRIES], ids=[g[0] for g in GEOMETRIES])
@pytest.mark.parametrize("name", CONVS)
def test_each_kind_matches_a_plain_reference(name, kwargs, form):
    """Small integers, so every sum is exact in float32 whatever order a kernel adds in."""
    generator = torch.Generator().manual_seed(3)
    module = GhostConv(3, conv=name, softmax=False, **kwargs).eval()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randint(-3, 4, param.shape, generator=generator).float())
    x = torch.randint(-3, 4, (2, 5, module.parts, 3), generator=generator).float()
    expected = _plain_ghosts(name, x, module.weight.detach(), module.relu, module.scale)
    out = KINDS[name].forward(x, module.weight.detach(), relu=module.relu, form=form)
    out = out.sum(3) if out.dim() == 5 else out
    out = out * module.scale.detach() if module.scale is not None else out
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(module(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", CONVS)
def test_padded_tokens_never_change_a_sequences_outputs(name):
    """A sequence padded on the right, one padded on the left, with large values in the padding:
    their real tokens get exactly the outputs of each sequence alone. Without the mask, the kinds
    that slide over the sequence would let the padding in."""
    generator = torch.Generator().manual_seed(4)
    module = GhostConv(3, conv=name, kernel_size=5, softmax=False, parts=2, features=2).eval()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randint(-3, 4, param.shape, generator=generator).float())
    alone = [torch.randint(-3, 4, (1, n, 2, 3), generator=generator).float() for n in (4, 3)]
    garbage = torch.full((1, 3, 2, 3), 50.0)
    batch = torch.cat([torch.cat([alone[0], garbage[:, :2]], 1), torch.cat([garbage, alone[1]], 1)])  # (2, 6, 2, 3)
    keep = torch.tensor([[1.0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        padded = module(batch, keep)
        torch.testing.assert_close(padded[0, :4], module(alone[0])[0], rtol=0, atol=0)
        torch.testing.assert_close(padded[1, 3:], module(alone[1])[0], rtol=0, atol=0)
        unmasked = module(batch)
    leaks = not torch.equal(unmasked[0, :4], padded[0, :4])
    assert leaks == KINDS[name].masks_padding  # the mask is needed exactly where a kind mixes tokens


# ---- the weight shape each kind states is the one a checkpoint's record restores ----
#: the shapes as checkpoints have always stored them (lead = outputs Q, features F, parts P)
STORED_SHAPES = {
    "dwconv": lambda q, f, p, c, k: (q, f, p, c, k),
    "conv1d-seq": lambda q, f, p, c, k: (q, f, p, c, c, k),
    "conv1d-feature": lambda q, f, p, c, k: (q, f, p, k),
    "conv2d": lambda q, f, p, c, k: (q, f, p, k, k),
}


@pytest.mark.parametrize("name", CONVS)
def test_each_kinds_weight_shape_is_what_the_record_restores(name, tmp_path):
    model = tiny_model("bert", "sequence-classification")
    adapter = get_adapter(model.config)
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter),
                      heads_width=Fraction(2, 4), ffn_width=Fraction(1, 3))
    per_head = name != "conv1d-seq"  # keep the d x d x k kernels of conv1d-seq small
    settings = GhostSettings(conv=name, positions="v,o,ffn2" if per_head else "v,o,ffn1,ffn2", per_head=per_head,
                             features=2, kernel_size=5)
    attach_ghosts(model, settings)
    record.methods["ghost"] = ghost_record(model, settings)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, GhostConv):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
    save_checkpoint(model, tmp_path / "ghost", record)
    loaded = load_model(tmp_path / "ghost")
    convs = {n: m for n, m in loaded.named_modules() if isinstance(m, GhostConv)}
    assert convs and {m.conv for m in convs.values()} == {name}
    assert max(m.parts for m in convs.values()) == (2 if per_head else 1)  # --per-head: the 2 kept heads
    for module_name, module in convs.items():
        geometry = (module.outputs, module.features, module.parts)
        stated = KINDS[name].weight_shape(geometry, module.channels, module.kernel_size)
        assert tuple(module.weight.shape) == stated == STORED_SHAPES[name](*geometry, module.channels, 5), module_name
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)
