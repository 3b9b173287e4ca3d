"""``prune --speedup X --latency FILE``: the most importance for a predicted latency <= dense / X
(greedy removal by importance lost per millisecond saved, ``methods/pruning/latency_allocation.py``)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch

from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.methods.pruning import ImportanceScores, select_for_latency
from ghostify.methods.pruning.latency_allocation import comparable_scores, predict
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS, tiny_checkpoint

from .conftest import run_cli


def latency_model(geometry: Geometry, base: float = 1.0, layer: float = 1.0, head: float = 2.0,
                  neuron: float = 1.0) -> LatencyModel:
    return LatencyModel(geometry=geometry, deployment=Deployment(), machine="test", base_ms=base, layer_ms=layer,
                        head_ms=head, neuron_ms=neuron)


# ----------------------------------------------------------------------------------------------
# the allocator
# ----------------------------------------------------------------------------------------------
#: 2 layers of 2 heads and 3 neurons: dense 1 + 2 x (1 + 2 x 2 + 3 x 1) = 17 ms
SMALL = latency_model(Geometry("BERT", 8, 2, 3, 2))
HEAD_SCORES = [torch.tensor([0.4, 0.1]), torch.tensor([0.6, 0.8])]
FFN_SCORES = [torch.tensor([0.3, 0.05, 0.2]), torch.tensor([0.02, 0.5, 0.1])]


def test_hand_computed_example():
    # score lost per ms saved (a head saves 2 ms, a neuron 1; each layer's best head and neuron stay):
    # layer 1 neuron 0 (0.02), layer 0 head 1 (0.1 / 2 = 0.05; before the neuron of the same ratio:
    # heads first on a tie), layer 0 neuron 1 (0.05), layer 1 neuron 2 (0.1), layer 0 neuron 2 (0.2),
    # layer 1 head 0 (0.3): 17 -> 16 -> 14 -> 13 -> 12 -> 11 -> 9 ms
    assert SMALL.dense_ms() == 17
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 17 / 1.5)  # 11.33 ms
    assert selection.heads == [[0], [1, 0]]  # kept units by importance, as --width lists them
    assert selection.neurons == [[0], [1]]
    assert predicted == 11
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 13.5)
    assert (selection.heads, selection.neurons, predicted) == ([[0], [1, 0]], [[0, 2], [1, 2]], 13)
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 9)  # the fewest units: 1 and 1
    assert (selection.heads, selection.neurons, predicted) == ([[0], [1]], [[0], [1]], 9)


def test_an_unreachable_target_is_refused_with_the_best_speed_up():
    with pytest.raises(GhostifyError, match=r"out of reach: .* predict 9 ms, a speed-up of at most 1\.89x"):
        select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 17 / 2)


def test_a_target_already_met_removes_nothing():
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 17)
    assert selection.heads == [[0, 1], [1, 0]] and selection.neurons == [[0, 2, 1], [1, 2, 0]] and predicted == 17


def test_a_unit_that_saves_nothing_is_never_removed():
    free_heads = latency_model(Geometry("BERT", 8, 2, 3, 2), head=0.0)
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, free_heads, 7)  # dense 9: 2 neurons
    assert [len(h) for h in selection.heads] == [2, 2]  # though they score least per head
    assert selection.neurons == [[0, 2], [1, 2]] and predicted == 7


def test_shared_layers_save_once_per_run():
    # one layer run 3 times (dense 1 + 3 x 8 = 25 ms): a head saves 3 x 2 ms, a neuron 3 x 1 ms
    shared = latency_model(Geometry("albert", 8, 2, 3, 3))
    heads, ffn = [torch.tensor([0.4, 0.12])], [torch.tensor([0.3, 0.05, 0.2])]
    # neuron 1 (0.05 / 3) goes first, then head 1 (0.12 / 6 = 0.02), then neuron 2 (0.2 / 3)
    selection, predicted = select_for_latency(heads, ffn, shared, 22, applications=[3])
    assert selection.heads == [[0, 1]] and selection.neurons == [[0, 2]] and predicted == 22
    selection, predicted = select_for_latency(heads, ffn, shared, 19, applications=[3])
    assert selection.heads == [[0]] and selection.neurons == [[0, 2]] and predicted == 16
    assert predicted == predict(shared, [1], [2], [3])


def _ratios(scores: torch.Tensor, kept: list[int], ms: float) -> tuple[list[float], list[float]]:
    """The removed units' and the removable kept units' (all but the best) score per ms."""
    best = max(range(scores.numel()), key=lambda j: (float(scores[j]), j))
    removed = [float(scores[j]) / ms for j in range(scores.numel()) if j not in kept]
    removable = [float(scores[j]) / ms for j in kept if j != best]
    return removed, removable


@pytest.mark.parametrize("seed", range(6))
def test_predicted_meets_the_target_and_one_removal_less_would_not(seed):
    rng = random.Random(seed)
    layers, heads, ffn = rng.randint(1, 4), rng.randint(1, 6), rng.randint(2, 90)  # ffn < 128: neurons one by one
    lat = latency_model(Geometry("BERT", 16, heads, ffn, layers), base=rng.uniform(0, 2), layer=rng.uniform(0, 1),
                        head=rng.uniform(0.05, 1), neuron=rng.uniform(0.001, 0.05))
    g = torch.Generator().manual_seed(seed)
    head_scores = [torch.rand(heads, generator=g) for _ in range(layers)]
    ffn_scores = [torch.rand(ffn, generator=g) for _ in range(layers)]
    fewest = predict(lat, [1] * layers, [1] * layers)
    targets = [lat.dense_ms() / speedup for speedup in (1.0001, 1.1, 1.5)]
    for target in [t for t in targets if t >= fewest] + [fewest]:  # the fewest units: the best speed-up
        selection, predicted = select_for_latency(head_scores, ffn_scores, lat, target)
        counts = [len(h) for h in selection.heads], [len(n) for n in selection.neurons]
        assert predicted == pytest.approx(predict(lat, *counts)) and predicted <= target
        assert all(h >= 1 for h in counts[0]) and all(n >= 1 for n in counts[1])
        removed, removable, last = [], [], None
        for scores, kept, ms in [*zip(head_scores, selection.heads, [lat.head_ms] * layers),
                                 *zip(ffn_scores, selection.neurons, [lat.neuron_ms] * layers)]:
            gone, left = _ratios(scores, kept, ms)
            removed += gone
            removable += left
            if gone and (last is None or max(gone) > last[0]):
                last = (max(gone), ms)
        # the greedy order: nothing kept (but each layer's best) loses less per ms than what went
        assert not removed or not removable or max(removed) <= min(removable)
        # and it stopped at once: putting back the last removal misses the target
        if last is not None:
            assert predicted + last[1] > target
        assert len(removed) == sum(heads - h for h in counts[0]) + sum(ffn - n for n in counts[1])
    # close to 1: nearly everything stays (one removal at most here: each saves more than 0.01%)
    selection, _ = select_for_latency(head_scores, ffn_scores, lat, lat.dense_ms() / 1.0001)
    assert sum(heads + ffn - len(h) - len(n) for h, n in zip(selection.heads, selection.neurons)) <= 1


def test_neurons_go_in_groups_of_the_lowest():
    # FFN 256: groups of 256 // 64 = 4 neurons, the lowest-scored first, a group's score their sum
    lat = latency_model(Geometry("BERT", 8, 1, 256, 1), base=0, layer=0, head=1, neuron=1)
    ffn = torch.arange(256, 0, -1).float()  # neuron 255 scores lowest
    selection, predicted = select_for_latency([torch.ones(1)], [ffn], lat, 251)  # dense 257: 6 neurons, so 2 groups
    assert predicted == 249 and sorted(set(range(256)) - set(selection.neurons[0])) == [248, 249, 250, 251, 252, 253,
                                                                                         254, 255]


def test_weight_magnitude_scores_are_put_on_one_scale():
    heads, ffn = [torch.tensor([2.0, 6.0])], [torch.tensor([1.0, 3.0, 4.0])]
    for criterion in ("loss-gradient", "fisher"):  # the loss criteria: as they are
        same = comparable_scores(heads, ffn, criterion)
        assert same[0][0] is heads[0] and same[1][0] is ffn[0]
    h, f = comparable_scores(heads, ffn, "weight-magnitude")
    assert torch.allclose(h[0], torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert torch.allclose(f[0], torch.tensor([0.125, 0.375, 0.5], dtype=torch.float64))


def test_scores_that_are_not_numbers_are_refused():
    with pytest.raises(GhostifyError, match="NaN"):
        select_for_latency([torch.tensor([0.1, float("nan")])] * 2, FFN_SCORES, SMALL, 12)


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------
TINY = Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS)
#: dense 0.5 + 2 x (0.25 + 4 x 0.25 + 37 x 0.02) = 4.48 ms; the fewest units 1.54 ms
TINY_LATENCY = latency_model(TINY, base=0.5, layer=0.25, head=0.25, neuron=0.02)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> tuple[Path, ImportanceScores, Path]:
    root = tmp_path_factory.mktemp("speedup")
    model = tiny_checkpoint(root / "scored")
    g = torch.Generator().manual_seed(3)
    scores = ImportanceScores(heads=[torch.rand(HEADS, generator=g) for _ in range(LAYERS)],
                              ffn=[torch.rand(FFN, generator=g) / 20 for _ in range(LAYERS)])
    scores.save(model / "importance.safetensors")
    (root / "latency").mkdir()
    TINY_LATENCY.save(root / "latency" / "latency.json")
    return model, scores, root / "latency"


def _hashes(*roots: Path) -> dict[str, str]:
    files = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_the_command_writes_the_allocators_widths(scored, tmp_path, capsys):
    model, scores, latency = scored
    before = _hashes(model, latency)
    for run in ("a", "b"):
        code, _, err = run_cli(capsys, "prune", model, "-o", tmp_path / run, "--speedup", "2", "--latency", latency)
        assert code == 0, err
        assert "pruned for latency: 2x on onnx-int8" in err
    assert _hashes(model, latency) == before  # inputs untouched
    weights = [(tmp_path / run / "model.safetensors").read_bytes() for run in ("a", "b")]
    assert weights[0] == weights[1]  # reproducible

    selection, predicted = select_for_latency(scores.heads, scores.ffn, TINY_LATENCY, TINY_LATENCY.dense_ms() / 2)
    record = json.loads((tmp_path / "a" / "config.json").read_text())["ghostify"]
    assert record["heads"] == selection.heads and record["ffn"] == [len(n) for n in selection.neurons]
    assert record["heads"] != [list(range(HEADS))] * LAYERS  # it pruned something
    arguments = record["history"][-1]["arguments"]
    assert arguments["speedup"] == 2 and arguments["latency"] == str(latency.resolve())
    assert arguments["predicted_ms"] == round(predicted, 4) <= arguments["target_ms"] == round(4.48 / 2, 4)
    assert arguments["deployment"] == Deployment().describe()

    code, out, err = run_cli(capsys, "info", tmp_path / "a")
    assert code == 0, err
    assert "pruned for latency" in out and f"predicted {predicted:.4g} ms" in out and "2x on onnx-int8" in out
    card = (tmp_path / "a" / "README.md").read_text()
    assert "speedup=2.0" in card and f"predicted_ms={round(predicted, 4)}" in card and "latency=latency" in card
    assert str(latency.parent) not in card  # a local path by its name only


def test_layers_dropped_before_are_not_counted(scored, tmp_path, capsys):
    model, _, latency = scored
    code, _, err = run_cli(capsys, "drop-layers", model, "-o", tmp_path / "one", "--layers", "1")
    assert code == 0, err
    # the latency model of the 2-layer original: one layer left predicts 0.5 + 0.25 + 1 + 0.74 = 2.49 ms of 4.48
    code, _, err = run_cli(capsys, "prune", tmp_path / "one", "-o", tmp_path / "fast", "--speedup", "1.5", "--latency",
                           latency)
    assert code == 0, err
    arguments = json.loads((tmp_path / "fast" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    assert arguments["predicted_ms"] == pytest.approx(2.49, abs=1e-4)
    assert arguments["target_ms"] == pytest.approx(4.48 / 1.5, abs=1e-4)
    from ghostify.checkpoint import load_config
    from ghostify.steps.latency import original_geometry

    assert original_geometry(load_config(tmp_path / "one")) == TINY  # `ghostify latency` of it measures the original


@pytest.mark.parametrize("family", ["bert", "eurobert", "albert", "distilbert"])
def test_latency_and_pruning_describe_a_model_alike(family):
    """``ghostify latency`` writes the geometry ``prune --speedup`` compares with: one description.
    EuroBERT counts attention in key/value groups (what pruning removes); ALBERT's shared layer runs 3 times."""
    from ghostify.architectures import get_adapter
    from ghostify.methods.pruning import model_geometry
    from ghostify.steps.latency import original_geometry
    from ghostify.testing import tiny_config

    config = tiny_config(family)
    geometry = model_geometry(config, get_adapter(config), None)
    assert original_geometry(config) == geometry
    assert geometry.num_heads == (2 if family == "eurobert" else HEADS)
    assert geometry.num_layers == (3 if family == "albert" else 2)


def test_a_layers_units_cost_at_least_what_removing_the_layer_costs():
    """Issue 46: units priced alone guts the layer that matters as a whole. Layer 0's units sum to 0.4 and the
    layer scores 0.2: kept as they are. Layer 1's sum to 0.1 and the layer scores 1.0: raised tenfold, in
    proportion, so that removing them all costs what removing the layer does."""
    import torch

    from ghostify.methods.pruning import layer_consistent

    heads = [torch.tensor([0.1, 0.1]), torch.tensor([0.02, 0.03])]
    ffn = [torch.tensor([0.1, 0.1]), torch.tensor([0.05, 0.0])]
    raised_heads, raised_ffn = layer_consistent(heads, ffn, torch.tensor([0.2, 1.0]))
    assert torch.allclose(raised_heads[0], heads[0].double()) and torch.allclose(raised_ffn[0], ffn[0].double())
    assert torch.allclose(raised_heads[1], torch.tensor([0.2, 0.3], dtype=torch.float64))
    assert torch.allclose(raised_ffn[1], torch.tensor([0.5, 0.0], dtype=torch.float64))
    assert float(raised_heads[1].sum() + raised_ffn[1].sum()) == pytest.approx(1.0)
    same = layer_consistent(heads, ffn, None)
    assert all(torch.equal(a, b) for a, b in zip(same[0], heads))
