"""The registry of criteria (``ghostify/methods/criteria.py``): every reader of a criterion goes through it, so a
criterion added there alone is computed by ``importance``, kept in the scores file, ranked by ``prune``,
``drop-layers`` and ``prune-hidden``, put on one scale or not by the latency allocation, and tried by ``compress``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ghostify import steps
from ghostify.errors import GhostifyError
from ghostify.methods.criteria import (CHANNELS, FISHER, HEADS, LAYERS, LOSS_GRADIENT, Criterion, criteria, criterion,
                                       get, names, register, unregister)
from ghostify.methods.pruning import ImportanceScores
from ghostify.methods.pruning.latency_allocation import comparable_scores
from ghostify.recipe.compress_report import candidate_name
from ghostify.steps.fidelity import candidate_allocations
from ghostify.testing import tiny_checkpoint, write_toy_dataset

TOY = {"text_columns": ("sentence",), "label_column": "label"}
#: a criterion whose statistic of the gate gradients is the first-order one's, under another name: its scores must
#: equal the first-order scores exactly, wherever they are computed, kept or read
TWIN = "first-order-twin"


@pytest.fixture
def twin():
    first = get(LOSS_GRADIENT)
    registered = register(replace(first, name=TWIN, noun="the first-order twin", unit_scores=None,
                                  channel_scores=None))
    yield registered
    unregister(TWIN)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=48, validation=16)


def _scored(root: Path, data: Path) -> Path:
    tiny_checkpoint(root / "m")
    steps.importance(root / "m", root / "scored", dataset=str(data), **TOY, samples=24, batch_size=8, max_length=32)
    return root / "scored"


def test_the_shipped_criteria_and_what_each_flag_may_name():
    assert [c.name for c in criteria()] == ["fisher", "loss-gradient", "activation", "weight-magnitude"]
    assert names(HEADS) == names(LAYERS) == ("fisher", "loss-gradient")
    assert names(CHANNELS) == ("fisher", "loss-gradient", "activation")
    # one refusal, naming what the flag may take for that unit
    for unit, bad, listed in ((HEADS, "taylor", "fisher, loss-gradient"), (LAYERS, "activation", "fisher, loss-gradient"),
                              (CHANNELS, "weight-magnitude", "fisher, loss-gradient, activation")):
        with pytest.raises(GhostifyError, match=f"unknown --criterion '{bad}'; choose one of {listed}$"):
            criterion(bad, unit)
    assert [name for name, *_ in candidate_allocations().items()] == ["fisher", "fisher+rearranged", "loss-gradient",
                                                                      "uniform"]


def test_a_registered_criterion_is_computed_kept_and_ranked_by(twin, data, tmp_path):
    scored = _scored(tmp_path, data)
    scores = ImportanceScores.load(scored)
    kept = scores.more[TWIN]  # computed by importance, saved and loaded under its name
    assert all(torch.equal(a, b) for a, b in zip(kept.heads + kept.ffn, scores.heads + scores.ffn))
    assert torch.equal(kept.layers, scores.layers) and torch.equal(kept.hidden, scores.hidden)
    assert scores.criteria() == ("loss-gradient", "fisher", TWIN)
    assert scores.hidden_criteria() == ("fisher", "loss-gradient", "activation", TWIN)
    heads, ffn, layers, used = scores.ranked_by(TWIN)
    assert used == TWIN and all(torch.equal(a, b) for a, b in zip(heads + ffn, scores.heads + scores.ffn))
    assert scores.hidden_ranked_by(TWIN)[1] == TWIN

    # prune, drop-layers and prune-hidden take it as --criterion: the same choices as by the first-order scores
    for name in (LOSS_GRADIENT, TWIN):
        record = steps.prune(scored, tmp_path / f"pruned-{name}", width="0.5", criterion=name)
        assert record.history[-1]["arguments"]["criterion"] == name
        steps.drop_layers(scored, tmp_path / f"dropped-{name}", keep=1, criterion=name)
        steps.prune_hidden(scored, tmp_path / f"narrow-{name}", hidden_width="0.5", criterion=name)
    for kind in ("pruned", "dropped", "narrow"):
        first, other = (tmp_path / f"{kind}-{name}" / "model.safetensors" for name in (LOSS_GRADIENT, TWIN))
        assert first.read_bytes() == other.read_bytes(), kind

    # on the loss's scale: a latency search compress tries, named by its noun
    assert TWIN in candidate_allocations() and candidate_name(TWIN) == "latency search by the first-order twin"


def test_a_registered_criterion_off_the_loss_scale_is_put_on_one_scale(twin):
    heads, ffn = [torch.tensor([2.0, 6.0])], [torch.tensor([1.0, 3.0, 4.0])]
    assert comparable_scores(heads, ffn, TWIN)[0][0] is heads[0]  # on the loss's scale, as registered
    unregister(TWIN)
    register(replace(twin, loss_scale=False))
    h, f = comparable_scores(heads, ffn, TWIN)
    assert torch.allclose(h[0], torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert torch.allclose(f[0], torch.tensor([0.125, 0.375, 0.5], dtype=torch.float64))
    assert TWIN not in candidate_allocations()  # compress compares only searches in the loss's units


def test_the_shipped_criteria_cannot_be_replaced_or_removed():
    with pytest.raises(GhostifyError, match="registered already"):
        register(Criterion(FISHER, summary="", noun="", ranks=frozenset({HEADS}), loss_scale=True))
    with pytest.raises(GhostifyError, match="ghostify's own"):
        unregister(FISHER)
