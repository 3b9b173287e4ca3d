"""The hidden size and whole layers as allocation axes (issue 38): the latency model's cost of a residual channel,
the greedy removal over heads, neurons, channels and layers, and ``compress`` cutting the residual stream
(prune-hidden before prune) on a tiny model."""

from __future__ import annotations

import importlib
import json
import math

import pytest
import torch

from ghostify.latency_model import ChannelCosts, Deployment, Geometry, LatencyModel
from ghostify.methods.pruning import plan_for_latency
from ghostify.testing import tiny_checkpoint, write_toy_dataset

from .conftest import run_cli

GEOMETRY = Geometry(family="BERT", hidden_size=384, num_heads=12, ffn_size=1536, num_layers=6)


def _latency(per_channel=(0.0005, 0.0015, 0.0002, 0.0000004), narrowest: int = 96, **costs) -> LatencyModel:
    """MiniLM's int8 costs (roughly, as measured here) with what a residual channel saves of each, and one probe at
    the narrowest hidden size the allocation may cut to."""
    values = {"base_ms": 0.52, "layer_ms": 0.59, "head_ms": 0.1, "neuron_ms": 0.00067, **costs}
    probe = {"layers": 1, "heads": [12], "neurons": [1536], "hidden": narrowest, "measured_ms": 1.0, "predicted_ms": 1.0}
    return LatencyModel(GEOMETRY, Deployment(), "test", **values, per_channel=ChannelCosts(*per_channel),
                        probes=[probe])


def _scores(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    heads = [torch.rand(12, generator=g) for _ in range(6)]
    ffn = [torch.rand(1536, generator=g) * 0.01 for _ in range(6)]
    channels = torch.rand(384, generator=g) * 0.05
    layers = torch.rand(6, generator=g) + 1.0
    return heads, ffn, channels, layers


def test_a_narrower_hidden_size_is_predicted_from_what_a_channel_saves():
    costs = _latency()
    full = costs.predict([12] * 6, [1536] * 6)
    half = costs.predict([12] * 6, [1536] * 6, hidden=192)
    c = costs.per_channel
    saved = 192 * (c.base + 6 * (c.layer + 12 * c.head + 1536 * c.neuron))
    assert full - half == pytest.approx(saved)


@pytest.mark.parametrize("speedup", [2.0, 3.0, 4.5])
def test_the_four_axis_plan_meets_the_target_and_cuts_channels_in_steps_of_the_head_count(speedup):
    heads, ffn, channels, layers = _scores()
    costs = _latency()
    target = costs.dense_ms() / speedup
    plan = plan_for_latency(heads, ffn, costs, target, layer_scores=layers, channel_scores=channels, channel_step=12)
    assert plan.predicted_ms <= target + 1e-9
    assert plan.hidden is not None and plan.hidden % 12 == 0 and 96 <= plan.hidden <= 384
    kept = plan.layers
    predicted = costs.predict([len(plan.selection.heads[i]) for i in range(len(kept))],
                              [len(plan.selection.neurons[i]) for i in range(len(kept))],
                              None if plan.hidden == 384 else plan.hidden)
    assert predicted == pytest.approx(plan.predicted_ms)
    # the channels kept are the best-scored ones
    worst_kept = min(float(channels[c]) for c in plan.channels)
    best_gone = max((float(channels[c]) for c in range(384) if c not in set(plan.channels)), default=-math.inf)
    assert best_gone <= worst_kept


def test_beyond_what_heads_and_neurons_reach_the_hidden_size_gets_there():
    """Heads and neurons alone stop near 3.6x on these costs (a layer's own 0.59 ms stays); channels go on."""
    heads, ffn, channels, _ = _scores()
    costs = _latency()
    fastest = costs.fastest_ms([12] * 6, [1536] * 6)
    assert costs.dense_ms() / fastest < 4
    target = costs.dense_ms() / 4.5
    plan = plan_for_latency(heads, ffn, costs, target, channel_scores=channels, channel_step=12)
    assert plan.predicted_ms <= target and plan.hidden < 384


def test_channels_that_cost_much_importance_stay_and_cheap_ones_go():
    heads, ffn, channels, _ = _scores()
    costs = _latency()
    target = costs.dense_ms() / 1.5
    precious = plan_for_latency(heads, ffn, costs, target, channel_scores=channels * 1e6, channel_step=12)
    assert precious.hidden == 384  # the same saving from heads and neurons costs far less importance
    cheap = plan_for_latency(heads, ffn, costs, target, channel_scores=channels * 1e-9, channel_step=12)
    assert cheap.hidden < 384


def test_without_channel_scores_or_a_model_measured_at_one_width_no_channel_goes():
    heads, ffn, channels, _ = _scores()
    costs = _latency()
    plan = plan_for_latency(heads, ffn, costs, costs.dense_ms() / 2)
    assert plan.hidden is None and plan.channels is None
    one_width = LatencyModel(GEOMETRY, Deployment(), "test", base_ms=0.52, layer_ms=0.59, head_ms=0.1,
                             neuron_ms=0.00067)
    plan = plan_for_latency(heads, ffn, one_width, one_width.dense_ms() / 2, channel_scores=channels, channel_step=12)
    assert plan.hidden == 384  # scored, but the latency model cannot price a narrower stream


# ----------------------------------------------------------------------------------------------------
# compress cutting the residual stream on a tiny model
# ----------------------------------------------------------------------------------------------------
@pytest.fixture
def cheap_channels(tmp_path, monkeypatch):
    """A latency model of fixed costs in which the residual stream is most of the time (so the plan cuts it)."""
    latency_step = importlib.import_module("ghostify.steps.latency")

    def fixed(config, geometry, deployment, machine, **kwargs):
        probe = {"layers": 1, "heads": [4], "neurons": [37], "hidden": 8, "measured_ms": 1.0, "predicted_ms": 1.0}
        return LatencyModel(geometry, deployment, machine, base_ms=1.0, layer_ms=2.0, head_ms=0.05, neuron_ms=0.001,
                            per_channel=ChannelCosts(0.03, 0.06, 0.001, 0.00002), probes=[probe])

    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(latency_step, "measure", fixed)


def test_compress_cuts_the_hidden_size_when_it_costs_least(tmp_path, capsys, cheap_channels):
    model = tiny_checkpoint(tmp_path / "model")
    toy = write_toy_dataset(tmp_path / "toy", train=48, validation=24)
    out = tmp_path / "out"
    args = ["compress", model, "-o", out, "--dataset", toy, "--text-columns", "sentence", "--label-column", "label",
            "--max-length", "32", "--max-samples", "32", "--importance-samples", "16", "--rounds", "3", "--speedup", "1.5",
            "--runtime", "pytorch", "--no-drop-layers"]  # (whole layers cost these costs' most: the plan would drop one)
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "prune-hidden keeps" in err
    stages = sorted(p.name for p in (out / "stages").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert "04-prune-hidden" in stages and "05-prune" in stages
    report = json.loads((out / "report.json").read_text())
    final = json.loads((out / "stages" / "08-final" / "config.json").read_text())
    assert final["hidden_size"] < 32 and final["hidden_size"] % 4 == 0
    allocation = json.loads((out / "allocation.json").read_text())
    assert allocation["hidden_width"] == f"{final['hidden_size']}/32"
    assert report["metrics"]
    # prune read the scores of the model before its channels went (no magnitude fallback)
    prune = json.loads((out / "stages" / "05-prune" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    assert prune["importance"].endswith("03-importance") or prune["importance"].endswith("importance.safetensors")
    # the axis turned off: heads and neurons alone cannot reach 1.5x on these costs, and the refusal says what would
    code, stdout, err = run_cli(capsys, *[str(a) for a in args[:3]], str(tmp_path / "off"), *[str(a) for a in args[4:]],
                                "--no-prune-hidden")
    assert code == 2 and "or let whole layers (--drop-layers) or residual channels (--prune-hidden) go" in err
    assert not (tmp_path / "off").exists()
