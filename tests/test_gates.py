"""Gates: at one they change nothing; at zero they equal physically pruned weights."""

from __future__ import annotations

import pytest
import torch

from ghostify.architectures import get_adapter
from ghostify.example_loss import per_example_loss
from ghostify.methods.pruning import compute_importance, gated, prune_model
from ghostify.methods.pruning.apply import dense_record
from ghostify.testing import FFN, tiny_batch, tiny_model

from .conftest import ALL_FAMILIES, SDPA_FAMILIES

ATTENTION = [(f, "eager") for f in ALL_FAMILIES] + [(f, "sdpa") for f in SDPA_FAMILIES]


def _hidden(model, batch):
    return model(**batch).last_hidden_state


@pytest.mark.parametrize(("family", "attn"), ATTENTION)
def test_gates_at_one_change_nothing(family, attn):
    model = tiny_model(family, attn_implementation=attn)
    batch = tiny_batch()
    reference = _hidden(model, batch)
    with gated(model, get_adapter(model.config)):
        gated_out = _hidden(model, batch)
    assert torch.equal(reference, gated_out)


@pytest.mark.parametrize(("family", "attn"), ATTENTION)
def test_zeroed_gates_equal_physical_pruning(family, attn):
    model = tiny_model(family, attn_implementation=attn)
    adapter = get_adapter(model.config)
    batch = tiny_batch()
    n_layers = len(adapter.layers(model))
    units = adapter.num_units(model.config)  # heads, or key/value groups (EuroBERT)
    keep_heads = [[units - 1, 0], [units - 1], [1]][:n_layers]  # reordered, one, another one
    keep_neurons = [[0, 5, 7, 30, 36], list(range(0, FFN, 2)), [1, 2, 3]][:n_layers]
    head_gates = [torch.zeros(units) for _ in range(n_layers)]
    ffn_gates = [torch.zeros(FFN) for _ in range(n_layers)]
    for i in range(n_layers):
        head_gates[i][keep_heads[i]] = 1.0
        ffn_gates[i][keep_neurons[i]] = 1.0
    with gated(model, adapter, heads=head_gates, ffn=ffn_gates):
        masked = _hidden(model, batch)
    prune_model(model, adapter, dense_record(model, adapter), keep_heads, keep_neurons)
    pruned = _hidden(model, batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(pruned[real], masked[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_importance_matches_finite_differences(family):
    """Importance = mean over examples of |d loss_i / d gate|; check it against central
    differences of the per-example loss, in float64."""
    model = tiny_model(family, "sequence-classification", num_labels=3).double()
    adapter = get_adapter(model.config)
    batch = tiny_batch(batch_size=4, seed=1)
    labels = torch.tensor([0, 2, 1, 2])
    scores = compute_importance(model, adapter, [dict(batch, labels=labels)])

    def losses(layer: int, unit: int, kind: str, value: float) -> torch.Tensor:
        n_layers = len(adapter.layers(model))
        heads = [torch.ones(adapter.num_units(model.config), dtype=torch.float64) for _ in range(n_layers)]
        ffn = [torch.ones(FFN, dtype=torch.float64) for _ in range(n_layers)]
        (heads if kind == "head" else ffn)[layer][unit] = value
        with torch.no_grad(), gated(model, adapter, heads=heads, ffn=ffn):
            return per_example_loss(model(**batch).logits, labels, regression=False)

    # EuroBERT's RMSNorm computes in float32 even in a float64 model: its rounding (~1e-7, and
    # thread-dependent) would swamp a difference quotient over a small step
    eps, rel = (3e-2, 2e-3) if family == "eurobert" else (1e-4, 1e-4)
    last_unit = adapter.num_units(model.config) - 1
    for kind, layer, unit in [("head", 0, 1), ("head", len(scores.heads) - 1, last_unit), ("ffn", 0, 4), ("ffn", 0, 20)]:
        derivative = (losses(layer, unit, kind, 1 + eps) - losses(layer, unit, kind, 1 - eps)) / (2 * eps)
        expected = derivative.abs().mean().item()
        got = (scores.heads if kind == "head" else scores.ffn)[layer][unit].item()
        assert got == pytest.approx(expected, rel=rel, abs=1e-9), (kind, layer, unit)


def test_importance_does_not_depend_on_batch_size():
    model = tiny_model("bert", "sequence-classification")
    adapter = get_adapter(model.config)
    batch = tiny_batch(batch_size=4, seed=3)
    labels = torch.tensor([0, 1, 1, 0])
    whole = compute_importance(model, adapter, [dict(batch, labels=labels)])
    halves = [{k: v[i : i + 2] for k, v in dict(batch, labels=labels).items()} for i in (0, 2)]
    split = compute_importance(model, adapter, halves)
    for a, b in zip(whole.heads + whole.ffn, split.heads + split.ffn):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_label_free_and_regression_scores_are_finite_and_nonzero():
    clf = tiny_model("bert", "sequence-classification")
    adapter = get_adapter(clf.config)
    batch = tiny_batch(batch_size=4)
    free = compute_importance(clf, adapter, [batch], label_free=True, seed=0)
    again = compute_importance(clf, adapter, [batch], label_free=True, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(free.heads, again.heads))  # seeded
    assert all(t.sum() > 0 for t in free.heads + free.ffn)
    reg = tiny_model("bert", "sequence-classification", num_labels=1)
    scores = compute_importance(reg, adapter, [dict(batch, labels=torch.tensor([0.5, 1.0, 4.0, 2.5]))])
    assert all(torch.isfinite(t).all() and t.sum() > 0 for t in scores.heads + scores.ffn)
