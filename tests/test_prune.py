"""Selection, physical pruning and exact save -> load for every family and task head."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from ghostify import load_model, save_checkpoint
from ghostify.architectures import get_adapter
from ghostify.errors import GhostifyError
from ghostify.methods.pruning import ImportanceScores, magnitude_importance, parse_width, select
from ghostify.methods.pruning.apply import dense_record, prune
from ghostify.testing import FFN, ships_head, tiny_batch, tiny_model

from .conftest import ALL_FAMILIES
from .conftest import HEADS as MODEL_HEADS


def _outputs(model, batch):
    out = model(**batch)
    return out.logits if hasattr(out, "logits") and out.logits is not None else (
        out.start_logits if hasattr(out, "start_logits") else out.last_hidden_state
    )


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_width_one_is_the_identity(family):
    model = tiny_model(family, "sequence-classification")
    batch = tiny_batch()
    before = _outputs(model, batch)
    adapter = get_adapter(model.config)
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter),
                      heads_width=Fraction(1), ffn_width=Fraction(1))
    units = adapter.num_units(model.config)
    assert record.heads_per_layer == [units] * len(record.heads) and record.ffn == [FFN] * len(record.ffn)
    torch.testing.assert_close(_outputs(model, batch), before, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("head", MODEL_HEADS)
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_pruned_save_load_is_exact(family, head, tmp_path):
    if not ships_head(family, head):
        pytest.skip(f"transformers has no {head} head for {family}")
    model = tiny_model(family, head)
    adapter = get_adapter(model.config)
    scores = magnitude_importance(model, adapter)
    _, record = prune(model, dense_record(model, adapter), scores, heads_width=Fraction(2, 4), ffn_width=Fraction(1, 3))
    batch = tiny_batch()
    before = _outputs(model, batch)
    save_checkpoint(model, tmp_path / "ckpt", record)
    loaded = load_model(tmp_path / "ckpt")
    assert type(loaded) is type(model)
    assert torch.equal(_outputs(loaded, batch), before)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("family", ["bert", "mpnet", "deberta-v2"])
def test_pruning_twice_composes_original_head_indices(family, tmp_path):
    model = tiny_model(family)
    adapter = get_adapter(model.config)
    record = dense_record(model, adapter)
    first = ImportanceScores(heads=[torch.tensor([0.1, 0.9, 0.5, 0.7])] * 2, ffn=[torch.arange(FFN).float()] * 2)
    _, record = prune(model, record, first, heads_width=Fraction(3, 4), ffn_width=Fraction(1))
    assert record.heads == [[1, 3, 2], [1, 3, 2]]  # ordered by importance
    second = ImportanceScores(heads=[torch.tensor([0.1, 0.3, 0.2])] * 2, ffn=[torch.arange(FFN).float()] * 2)
    _, record = prune(model, record, second, heads_width=Fraction(2, 4), ffn_width=Fraction(1))
    assert record.heads == [[3, 2], [3, 2]]
    batch = tiny_batch()
    save_checkpoint(model, tmp_path / "twice", record)
    assert torch.equal(load_model(tmp_path / "twice")(**batch).last_hidden_state, model(**batch).last_hidden_state)


def test_uniform_counts_floor_heads_round_neurons():
    scores = [torch.rand(12) for _ in range(3)], [torch.rand(3072) for _ in range(3)]
    for width, heads, neurons in [("3/12", 3, 768), ("0.3", 3, 922), ("1/12", 1, 256), ("0.5", 6, 1536)]:
        sel = select(*scores, num_heads=12, ffn_size=3072, heads_width=parse_width(width), ffn_width=parse_width(width))
        assert [len(h) for h in sel.heads] == [heads] * 3
        assert [len(n) for n in sel.neurons] == [neurons] * 3


def test_kept_units_are_ordered_by_importance():
    head = torch.tensor([0.2, 0.9, 0.1, 0.5])
    sel = select([head], [torch.tensor([3.0, 1.0, 2.0])], num_heads=4, ffn_size=3,
                 heads_width=Fraction(3, 4), ffn_width=Fraction(2, 3))
    assert sel.heads == [[1, 3, 0]] and sel.neurons == [[0, 2]]


def test_global_allocation_lets_layers_differ_and_keeps_one_per_layer():
    heads = [torch.tensor([9.0, 8.0, 7.0, 6.0]), torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 5.0, 5.0])]
    ffn = [torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([4.0, 0.1, 0.1, 0.1]), torch.tensor([1.0, 2.0, 3.0, 4.0])]
    sel = select(heads, ffn, num_heads=4, ffn_size=4, heads_width=Fraction(2, 4), ffn_width=Fraction(2, 4), allocation="global")
    # per-layer normalised: layer 1 has one dominant head (1.0); budget 6 heads overall
    assert sum(len(h) for h in sel.heads) == 6 and all(len(h) >= 1 for h in sel.heads)
    assert sel.heads[1] == [0]
    assert len(sel.heads[0]) != len(sel.heads[1])
    assert sum(len(n) for n in sel.neurons) == 6 and sel.neurons[1][0] == 0


@pytest.mark.parametrize("text", ["0", "-0.5", "1.5", "abc", "3/0"])
def test_bad_widths_are_refused(text):
    with pytest.raises(GhostifyError):
        parse_width(text)


def test_width_that_keeps_no_head_is_refused():
    with pytest.raises(GhostifyError, match="keeps no head"):
        select([torch.rand(4)], [torch.rand(8)], num_heads=4, ffn_size=8, heads_width=Fraction(1, 5), ffn_width=Fraction(1, 5))


def test_albert_shared_layer_is_pruned_once_for_all_its_applications(tmp_path):
    model = tiny_model("albert", "sequence-classification")
    adapter = get_adapter(model.config)
    assert len(adapter.layers(model)) == 1 and adapter.layer_applications(model) == [3]
    _, record = prune(model, dense_record(model, adapter), magnitude_importance(model, adapter),
                      heads_width=Fraction(1, 4), ffn_width=Fraction(1, 4))
    assert record.heads_per_layer == [1] and record.ffn == [9]
    batch = tiny_batch()
    save_checkpoint(model, tmp_path / "a", record)
    assert torch.equal(load_model(tmp_path / "a")(**batch).logits, model(**batch).logits)
