"""ghostify's one attention kernel (ghostify.attention): each hook alone against transformers' eager
attention or hand-computed maths, and the combinations separate kernels refused: qk/v ghosts with
attention-score distillation, and qk/v ghosts in the first layer with RefBERT's references."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.bert.modeling_bert import eager_attention_forward

from ghostify import load_model
from ghostify.architectures import get_adapter
from ghostify.attention import ATTENTION, AttentionConfigView, attention_forward, recording_scores, use_attention_kernel
from ghostify.data import resolve_task
from ghostify.methods.ghost import GhostSettings, attach_ghosts, ghost_parameter_names
from ghostify.methods.pruning import magnitude_importance
from ghostify.methods.pruning.apply import dense_record, prune
from ghostify.methods.references import ReferenceStore, install_references, nearest
from ghostify.tasks import kind_for
from ghostify.testing import HIDDEN, tiny_batch, tiny_checkpoint, tiny_model, write_toy_dataset
from ghostify.training.capture import capture, enable_score_capture
from ghostify.training.layer_map import build_layer_map
from ghostify.training.objectives import DistillObjective, DistillWeights

TOY = {"text_columns": ("sentence",), "label_column": "label"}
DELTA = 0.05


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
class _Module(nn.Module):
    """An attention module as the kernel sees it: a training flag and optional hooks."""


class _AddScores:
    def __init__(self, terms: torch.Tensor) -> None:
        self.terms = terms

    def add_scores(self, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.terms


class _Columns:
    def __init__(self, key: torch.Tensor, value: torch.Tensor, valid: torch.Tensor, delta: float) -> None:
        self.columns = SimpleNamespace(key=key, value=value, valid=valid)
        self.delta = delta
        self.calls: list[tuple[torch.Tensor, int]] = []

    def consume(self, attention: nn.Module, valid: torch.Tensor, *, heads: int):
        self.calls.append((valid, heads))
        return self.columns


def _qkv(batch=2, heads=3, length=5, size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, length, size, generator=g) for _ in range(3))


def _padding(batch=2, length=5) -> torch.Tensor:
    valid = torch.ones(batch, length, dtype=torch.bool)
    valid[1, 3:] = False
    return valid


def _additive(valid: torch.Tensor) -> torch.Tensor:
    """The eager-style 4-D mask of a (batch, length) padding mask."""
    return torch.zeros(valid.shape, dtype=torch.float32).masked_fill(~valid, torch.finfo(torch.float32).min)[:, None, None, :]


def _ghost_maps_by_hand(scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores + ReLU(k×k cross-correlation of the padding-zeroed scores with softmax(weight))``,
    zero beyond the map's edges (one kernel shared by the heads, one feature)."""
    assert weight.shape[:2] == (1, 1)
    k, length = weight.size(-1), scores.size(-1)
    kernel = weight.reshape(k * k).softmax(-1).view(k, k)
    keep = mask.to(scores.dtype)
    padded = F.pad(scores * keep[:, None, :, None] * keep[:, None, None, :], (k // 2,) * 4)
    conv = sum(kernel[a, b] * padded[..., a:a + length, b:b + length] for a in range(k) for b in range(k))
    return scores + conv.relu()


def _split(t: torch.Tensor, size: int) -> torch.Tensor:
    return t.view(t.size(0), t.size(1), -1, size).transpose(1, 2)


def _own_scores(attention: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(Q·Kᵀ/√d, Q, V) of one BERT self-attention module by hand."""
    size = attention.attention_head_size
    q, k, v = (_split(proj(x), size) for proj in (attention.query, attention.key, attention.value))
    return (q @ k.transpose(-1, -2)) / size ** 0.5, q, v


def _randomise_ghosts(model: nn.Module) -> None:
    """Trained-looking ghosts: a test must not pass because the initial kernels are uniform."""
    params = dict(model.named_parameters())
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in ghost_parameter_names(model):
            params[name].copy_(torch.randn(params[name].shape, generator=generator))


def _store(dt: int, seed: int = 0) -> ReferenceStore:
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 0, 5, 2, 4]
    offsets = torch.tensor([0, *lengths]).cumsum(0)
    keys = F.normalize(torch.randn(len(lengths), dt, generator=g), dim=-1)
    total = int(offsets[-1])
    return ReferenceStore(embeddings=torch.randn(total, dt, generator=g).half(),
                          last=torch.randn(total, dt, generator=g).half(), offsets=offsets,
                          input_ids=torch.randint(5, 99, (total,), generator=g), keys=keys,
                          neighbours=nearest(keys, keys, exclude_self=True))


def _layer0_io(model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(input of the first layer, input of its attention output projection) of one forward."""
    layer = model.encoder.layer[0]
    seen: dict[str, torch.Tensor] = {}

    def keep_input(module, args, kwargs) -> None:
        seen.setdefault("x", args[0] if args else next(iter(kwargs.values())))

    def keep_heads(module, args) -> None:
        seen.setdefault("heads", args[0])

    h1 = layer.register_forward_pre_hook(keep_input, with_kwargs=True)
    h2 = layer.attention.output.dense.register_forward_pre_hook(keep_heads)
    try:
        model(**batch)
    finally:
        h1.remove(), h2.remove()
    return seen["x"], seen["heads"]


# ----------------------------------------------------------------------------------------------
# each hook alone
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True])
def test_without_hooks_it_is_transformers_eager_attention(training):
    """Additive and bool masks, with (dropout 0) and without training: bit-identical to eager."""
    q, k, v = _qkv()
    valid = _padding()
    module = _Module().train(training)
    want = eager_attention_forward(module, q, k, v, _additive(valid), scaling=0.5, dropout=0.0)
    for mask in (_additive(valid), valid[:, None, None, :]):
        got = attention_forward(module, q, k, v, mask, scaling=0.5, dropout=0.0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    default = eager_attention_forward(module, q, k, v, None)
    got = attention_forward(module, q, k, v, None)  # scaling 1/√d when not given
    assert torch.equal(got[0], default[0]) and torch.equal(got[1], default[1])


def test_score_capture_records_the_scores_before_the_mask():
    q, k, v = _qkv()
    mask = _additive(_padding())
    sink: list[torch.Tensor] = []
    with recording_scores(sink):
        got = attention_forward(_Module(), q, k, v, mask, scaling=0.5)
    assert len(sink) == 1 and torch.equal(sink[0], torch.matmul(q, k.transpose(2, 3)) * 0.5)
    assert torch.equal(got[0], eager_attention_forward(_Module(), q, k, v, mask, scaling=0.5)[0])
    attention_forward(_Module(), q, k, v, mask, scaling=0.5)
    assert len(sink) == 1  # outside the block nothing is recorded


def test_score_hook_adds_its_terms_before_capture_and_masking():
    q, k, v = _qkv()
    mask = _additive(_padding())
    terms = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(3))
    module = _Module()
    module.ghost_qk = _AddScores(terms)
    sink: list[torch.Tensor] = []
    with recording_scores(sink):
        out, probs = attention_forward(module, q, k, v, mask, scaling=0.5)
    scores = torch.matmul(q, k.transpose(2, 3)) * 0.5 + terms
    want = F.softmax(scores + mask, dim=-1)
    assert torch.equal(sink[0], scores)
    assert torch.equal(probs, want) and torch.equal(out, torch.matmul(want, v).transpose(1, 2))


def test_column_hook_is_the_delta_shifted_joint_softmax():
    """Extra key/value columns: one softmax over own + extra columns, −δ at real keys, 0 at padding."""
    q, k, v = _qkv()
    valid = _padding()
    g = torch.Generator().manual_seed(4)
    ref_k, ref_v = torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 3, 4, 4, generator=g)
    ref_valid = torch.tensor([[True, True, False, False], [True, True, True, True]])
    module = _Module()
    module.ghostify_reference = _Columns(ref_k, ref_v, ref_valid, DELTA)
    sink: list[torch.Tensor] = []
    with recording_scores(sink):
        out, probs = attention_forward(module, q, k, v, _additive(valid), scaling=0.5)
    (seen_valid, heads), = module.ghostify_reference.calls
    assert torch.equal(seen_valid, valid) and heads == 3
    assert torch.equal(sink[0], torch.matmul(q, k.transpose(2, 3)) * 0.5)  # own columns only
    real = torch.cat([valid, ref_valid], 1)[:, None, None, :]
    joint = torch.cat([q @ k.transpose(-1, -2), q @ ref_k.transpose(-1, -2)], -1) * 0.5
    weights = (joint.masked_fill(~real, float("-inf")).softmax(-1) - DELTA) * real
    torch.testing.assert_close(probs, weights, atol=1e-6, rtol=1e-5)
    want = (weights @ torch.cat([v, ref_v], 2)).transpose(1, 2)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
    # no columns for this call (a shared ALBERT layer's later applications): plain attention
    module.ghostify_reference.columns = None
    out, _ = attention_forward(module, q, k, v, _additive(valid), scaling=0.5)
    assert torch.equal(out, eager_attention_forward(module, q, k, v, _additive(valid), scaling=0.5)[0])


def test_head_hook_appends_heads_mixed_by_the_probabilities():
    q, k, v = _qkv()
    mask = _additive(_padding())
    seen = []

    def extra(value, probs):
        seen.append(probs)
        return probs.mean(1, keepdim=True) @ value.sum(1, keepdim=True)

    module = _Module()
    module.ghost_v = extra
    out, probs = attention_forward(module, q, k, v, mask, scaling=0.5)
    scores = torch.matmul(q, k.transpose(2, 3)) * 0.5
    want = F.softmax(scores + mask, dim=-1)
    assert out.shape == (2, 5, 4, 4) and torch.equal(seen[0], want) and torch.equal(probs, want)
    assert torch.equal(out[:, :, :3], torch.matmul(want, v).transpose(1, 2))
    assert torch.equal(out[:, :, 3:], extra(v, want).transpose(1, 2))


def test_a_model_switched_to_the_kernel_is_the_eager_model():
    eager = tiny_model("bert", "sequence-classification", attn_implementation="eager")
    switched = tiny_model("bert", "sequence-classification", attn_implementation="eager")
    switched.set_attn_implementation(ATTENTION)
    batch = tiny_batch()
    assert torch.equal(switched(**batch).logits, eager(**batch).logits)


def test_one_view_switches_a_module_and_survives_model_switches():
    model = tiny_model("bert")
    attention = model.encoder.layer[0].attention.self
    use_attention_kernel(attention)
    view = attention.config
    use_attention_kernel(attention)  # idempotent
    assert attention.config is view and isinstance(view, AttentionConfigView)
    model.set_attn_implementation("eager")
    assert view._attn_implementation == ATTENTION and model.config._attn_implementation == "eager"
    assert view.hidden_size == model.config.hidden_size
    assert model.encoder.layer[1].attention.self.config._attn_implementation == "eager"


# ----------------------------------------------------------------------------------------------
# combinations: qk/v ghosts + attention-score distillation
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=32, validation=16)


@pytest.fixture(scope="module")
def ghosted(tmp_path_factory):
    """A tiny BERT teacher and its pruned (2 of 4 heads) student with qk, v, o and ffn2 ghosts."""
    from ghostify.steps import attach_ghost
    from ghostify.steps import prune as prune_step

    root = tmp_path_factory.mktemp("ghosted")
    tiny_checkpoint(root / "t", seed=1)
    with pytest.warns(UserWarning, match="weight magnitude"):  # no importance scores: data-free pruning
        prune_step(root / "t", root / "pruned", width="2/4")
    attach_ghost(root / "pruned", root / "ghost", positions="qk,v,o,ffn2")
    return root / "t", root / "ghost"


@pytest.mark.parametrize("references", [False, True], ids=["ghosts", "ghosts+references"])
def test_distill_ghosted_attention_with_attention_scores(tmp_path, toy, ghosted, references):
    from ghostify.steps import distill

    teacher, student = ghosted
    result = distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, epochs=1, batch_size=8,
                     max_samples=16, learning_rate=1e-2, attention_weight=1.0, references=references)
    assert result.steps == 2
    before, after = load_model(student).state_dict(), load_model(tmp_path / "d").state_dict()
    qk = "bert.encoder.layer.0.attention.self.ghost_qk.weight"
    assert torch.isfinite(after[qk]).all() and not torch.equal(before[qk], after[qk])

    # what the score loss reads of the distilled student: its ghost-modified scores, by hand
    model = load_model(tmp_path / "d")
    enable_score_capture(model)
    batch = tiny_batch()
    with torch.no_grad(), capture(model, scores=True) as captured:
        out = model(**batch, output_hidden_states=True)
    layers = model.bert.encoder.layer
    assert len(captured.scores) == len(layers)
    for i, layer in enumerate(layers):
        attention = layer.attention.self
        scores, _, _ = _own_scores(attention, out.hidden_states[i])
        want = _ghost_maps_by_hand(scores, attention.ghost_qk.weight, batch["attention_mask"])
        assert captured.scores[i].shape == (3, 2, 9, 9)
        torch.testing.assert_close(captured.scores[i], want, atol=1e-5, rtol=1e-4)


def test_the_attention_score_loss_trains_the_ghost_maps(ghosted):
    teacher, student = ghosted
    model, reference = load_model(student), load_model(teacher)
    weights = DistillWeights(emb_weight=0.0, mha_weight=0.0, ffn_weight=0.0, attention_weight=1.0)
    objective = DistillObjective(model, reference, weights=weights, layer_map=build_layer_map(2, 2),
                                 kind=kind_for(resolve_task("sst2")))
    loss, parts = objective(tiny_batch())
    assert parts["attention_loss"] > 0
    loss.backward()
    for layer in model.bert.encoder.layer:
        assert layer.attention.self.ghost_qk.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------------------------
# combinations: first-layer qk/v ghosts + references
# ----------------------------------------------------------------------------------------------
def _referenced(model: nn.Module, positions: str):
    attach_ghosts(model, GhostSettings(positions=positions))
    _randomise_ghosts(model)
    module = install_references(model, teacher_hidden=HIDDEN, delta=DELTA)
    module.load_store(_store(HIDDEN))
    return module


def _joint_by_hand(attention, q, scores, v, mask, emb, last, ref_mask):
    """(softmax([S, Q·K_refᵀ/√d]) − δ at real keys, 0 at padding) and ``[V; V_ref]``."""
    size = attention.attention_head_size
    ref_k, ref_v = _split(attention.key(emb), size), _split(attention.value(last), size)
    real = torch.cat([mask.bool(), ref_mask.bool()], 1)[:, None, None, :]
    joint = torch.cat([scores, (q @ ref_k.transpose(-1, -2)) / size ** 0.5], -1)
    weights = (joint.masked_fill(~real, float("-inf")).softmax(-1) - DELTA) * real
    return weights, torch.cat([v, ref_v], 2)


def test_first_layer_qk_ghost_with_references_and_capture_by_hand():
    model = tiny_model("bert", attn_implementation="eager")
    module = _referenced(model, "qk")
    enable_score_capture(model)  # all three hooks in one call
    batch, index = tiny_batch(), torch.tensor([0, 2, 3])
    mask = batch["attention_mask"]
    with torch.no_grad(), module.given(index), capture(model, scores=True) as captured:
        x, heads = _layer0_io(model, batch)
        attention = model.encoder.layer[0].attention.self
        scores, q, v = _own_scores(attention, x)
        scores = _ghost_maps_by_hand(scores, attention.ghost_qk.weight, mask)
        emb, last, ref_mask = module.entries_of(index, torch.float32)
        weights, values = _joint_by_hand(attention, q, scores, v, mask, emb, last, ref_mask)
    torch.testing.assert_close(captured.scores[0], scores, atol=1e-5, rtol=1e-4)
    want = (weights @ values).transpose(1, 2).reshape(x.shape)
    real = mask.bool()
    torch.testing.assert_close(heads[real], want[real], atol=1e-5, rtol=1e-4)


def test_first_layer_v_ghost_heads_with_references_mix_by_the_own_columns():
    model = tiny_model("bert", attn_implementation="eager")
    adapter = get_adapter(model.config)
    prune(model, dense_record(model, adapter), magnitude_importance(model, adapter), heads_width=Fraction(2, 4),
          ffn_width=Fraction(1, 3))
    module = _referenced(model, "qk,v")
    batch, index = tiny_batch(), torch.tensor([4, 0, 2])
    mask = batch["attention_mask"]
    with torch.no_grad(), module.given(index):
        x, heads = _layer0_io(model, batch)
        attention = model.encoder.layer[0].attention.self
        scores, q, v = _own_scores(attention, x)
        scores = _ghost_maps_by_hand(scores, attention.ghost_qk.weight, mask)
        emb, last, ref_mask = module.entries_of(index, torch.float32)
        weights, values = _joint_by_hand(attention, q, scores, v, mask, emb, last, ref_mask)
        kept = weights @ values
        ghosts = attention.ghost_v(v, weights[..., : x.size(1)])
    want = torch.cat([kept, ghosts], 1).transpose(1, 2).reshape(*x.shape[:2], -1)
    assert heads.shape == (3, 9, HIDDEN)  # 2 kept + 2 ghost heads of 8
    real = mask.bool()
    torch.testing.assert_close(heads[real], want[real], atol=1e-5, rtol=1e-4)
