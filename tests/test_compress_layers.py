"""Whole layers in the latency allocation (issue 26): ``plan_for_latency`` weighs removing a layer
(its score, for ``layer_ms`` plus what the layer still keeps) against its heads and neurons, and
``compress --drop-layers`` drops the layers it removes, scores the smaller model again and lets
``prune --speedup`` allocate the rest on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from ghostify.checkpoint import load_config
from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.methods.pruning import ImportanceScores, plan_for_latency, select_for_latency
from ghostify.recipe import compress as compress_module
from ghostify.recipe.compress import compress_recipe
from ghostify.recipe.plan import plan
from ghostify.recipe.schema import validate
from ghostify.recipe.yaml_source import RecipeSource
from ghostify.settings import BUDGETS
from ghostify.steps.latency import cache_file, machine_key, original_geometry
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS, tiny_checkpoint, write_toy_dataset

from .conftest import run_cli


def latency_model(geometry: Geometry, base: float, layer: float, head: float, neuron: float,
                  deployment: Deployment = Deployment(), machine: str = "test") -> LatencyModel:
    return LatencyModel(geometry=geometry, deployment=deployment, machine=machine, base_ms=base, layer_ms=layer,
                        head_ms=head, neuron_ms=neuron)


# ----------------------------------------------------------------------------------------------
# the plan (test_prune_speedup.py's example: 2 layers of 2 heads and 3 neurons, a layer
# 1 + 2 x 2 + 3 x 1 = 8 ms, dense 1 + 2 x 8 = 17 ms; the fewest units 1 + 2 x 4 = 9 ms)
# ----------------------------------------------------------------------------------------------
SMALL = latency_model(Geometry("BERT", 8, 2, 3, 2), base=1, layer=1, head=2, neuron=1)
HEAD_SCORES = [torch.tensor([0.4, 0.1]), torch.tensor([0.6, 0.8])]
FFN_SCORES = [torch.tensor([0.3, 0.05, 0.2]), torch.tensor([0.02, 0.5, 0.1])]


def _plan(target: float, layer_scores, **kwargs):
    return plan_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, target, layer_scores=layer_scores, **kwargs)


def test_a_layer_that_scores_little_and_costs_much_goes_first():
    # layer 1 scores 0.01 for 8 ms: 0.00125 per ms, below every unit's (the lowest: layer 1's neuron 0,
    # 0.02 per ms); removing it alone meets 17 / 1.5 = 11.33 ms (1 + 8 = 9), and layer 0 keeps everything
    plan = _plan(17 / 1.5, [1.0, 0.01])
    assert (plan.layers, plan.dropped, plan.predicted_ms) == ([0], [1], 9)
    assert plan.selection.heads == [[0, 1]] and plan.selection.neurons == [[0, 2, 1]]
    # without layer scores the same target takes heads and neurons from both layers (11 ms)
    assert select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 17 / 1.5)[1] == 11


@pytest.mark.parametrize("target", [17, 13.5, 17 / 1.5, 9])
def test_a_layer_with_a_large_score_waits_for_the_cheap_units(target):
    # 5 for 8 ms (0.625 per ms; 1.25 once its units are gone) is above every unit's ratio (at most
    # 0.3): every target the units reach is met by them, exactly as without layer scores
    plan = _plan(target, [5.0, 5.0])
    selection, predicted = select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, target)
    assert (plan.layers, plan.dropped) == ([0, 1], [])
    assert (plan.selection, plan.predicted_ms) == (selection, predicted)


def test_a_layer_goes_once_the_units_cannot_meet_the_target():
    # 8 ms is below the fewest units' 9: all the units go (ratios <= 0.3), then a layer (1.25 per ms
    # for 4 ms; layer 0 on the tie). Layer 1 then gets back what 8 ms allows: all of it (9 ms) but its
    # cheapest removal, neuron 0 (0.02 per ms): 8 ms, as `prune --speedup` on the one-layer model
    plan = _plan(8, [5.0, 5.0])
    assert (plan.layers, plan.dropped, plan.predicted_ms) == ([1], [0], 8)
    assert plan.selection.heads == [[1, 0]] and plan.selection.neurons == [[1, 2]]
    with pytest.raises(GhostifyError, match="out of reach"):
        select_for_latency(HEAD_SCORES, FFN_SCORES, SMALL, 8)


def test_a_fixed_first_layer_stays():
    # as above, but layer 0 may not go: layer 1 does; layer 0 from 9 ms loses its head 1 (0.05 per ms,
    # before neuron 1's 0.05 on the tie): 7 ms
    plan = _plan(8, [5.0, 5.0], first_layer_fixed=True)
    assert (plan.layers, plan.dropped, plan.predicted_ms) == ([0], [1], 7)
    assert plan.selection.heads == [[0]] and plan.selection.neurons == [[0, 2, 1]]
    # even a first layer that scores nothing, which would go first otherwise
    assert _plan(17 / 1.5, [0.0, 5.0]).dropped == [0]
    assert _plan(17 / 1.5, [0.0, 5.0], first_layer_fixed=True).dropped == []


def test_a_shared_layer_is_never_dropped():
    # layer 0 runs twice (dense 1 + 2 x 8 + 8 = 25 ms); both score 0, but only layer 1 may go: 17 ms
    plan = _plan(20, [0.0, 0.0], applications=[2, 1])
    assert (plan.layers, plan.dropped, plan.predicted_ms) == ([0], [1], 17)


def test_one_layer_always_stays():
    # both score 0: layer 0 goes (the tie), layer 1 may not; its units meet 5 ms (1 + 1 + 2 + 1)
    plan = _plan(5, [0.0, 0.0])
    assert (plan.layers, plan.dropped, plan.predicted_ms) == ([1], [0], 5)
    with pytest.raises(GhostifyError, match=r"even dropping every layer that may go .* predict 5 ms, a speed-up of "
                                            r"at most 3\.4x"):
        _plan(4, [0.0, 0.0])


@pytest.mark.parametrize("scores", [[0.5, -0.1], [0.5, float("nan")]], ids=["negative", "nan"])
def test_layer_scores_that_are_not_numbers_are_refused(scores):
    with pytest.raises(GhostifyError, match="layer scores hold negative, NaN or infinite values"):
        _plan(10, scores)


# ----------------------------------------------------------------------------------------------
# compress
# ----------------------------------------------------------------------------------------------
TINY = Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> tuple[Path, ImportanceScores]:
    root = tmp_path_factory.mktemp("layers")
    model = tiny_checkpoint(root / "scored")
    g = torch.Generator().manual_seed(5)
    scores = ImportanceScores(heads=[torch.rand(HEADS, generator=g) for _ in range(LAYERS)],
                              ffn=[torch.rand(FFN, generator=g) / 20 for _ in range(LAYERS)],
                              layers=torch.tensor([0.3, 0.2]))
    return model, scores


def _recipe(model: Path, keep_layers=None):
    raw = compress_recipe(str(model), speedup=1.5, deployment=Deployment(runtime="pytorch"), budget=BUDGETS["quick"],
                          data={"task": "sst2"}, ghosts=False, teacher=str(model), seed=0, keep_layers=keep_layers)
    return validate(RecipeSource(yaml.safe_dump(raw, sort_keys=False), "compress"), raw)


def test_the_recipe_drops_the_planned_layers_before_prune(scored, tmp_path):
    model = scored[0]
    plain = _recipe(model)
    assert "drop-layers" not in [s.name for s in plain.stages]
    assert "importance" not in next(s for s in plain.stages if s.name == "prune").settings
    recipe = _recipe(model, keep_layers=[1])
    names = [s.name for s in recipe.stages]
    # prune refuses the scores of the model before drop-layers (tests/test_drop_layers.py): the smaller one is scored
    assert names[names.index("importance"):names.index("prune")] == ["importance", "drop-layers", "rescored"]
    assert recipe.stages[names.index("drop-layers")].settings == {"layers": "1"}
    assert recipe.stages[names.index("rescored")].command.name == "importance"
    planned = {p.stage.name: p for p in plan(recipe, tmp_path / "run")}
    assert planned["rescored"].arguments["model"] == str(planned["drop-layers"].directory)
    assert planned["prune"].arguments["model"] == str(planned["rescored"].directory)


def _planned_stages(tmp_path: Path, model: Path, scores: ImportanceScores, latency: LatencyModel) -> None:
    """What the importance and latency stages of ``_recipe`` leave, without running them."""
    stages = {p.stage.name: p.directory for p in plan(_recipe(model), tmp_path / "run")}
    tiny_checkpoint(stages["importance"])
    scores.save(stages["importance"] / "importance.safetensors")
    stages["latency"].mkdir(parents=True)
    latency.save(stages["latency"] / "latency.json")


@pytest.mark.parametrize("layer_scores, expected", [([0.3, 0.2], [0]), ([0.0, 0.9], [1]), (None, None)],
                         ids=["layer-1-goes", "layer-0-goes", "no-layer-scores"])
def test_compress_plans_layers_by_their_scores(scored, tmp_path, monkeypatch, layer_scores, expected):
    """A layer costs 100 ms, a head or neuron next to nothing: 1.5x is out of reach without removing a
    layer, so the lower-scored layer goes; scores without layer scores (magnitude, older files) drop none."""
    model, scores = scored
    scores = ImportanceScores(heads=scores.heads, ffn=scores.ffn, layers=None if layer_scores is None else
                              torch.tensor(layer_scores))
    _planned_stages(tmp_path, model, scores, latency_model(TINY, base=1, layer=100, head=0.01, neuron=0.001))
    monkeypatch.setattr(compress_module, "run_recipe", lambda *a, **k: None)  # the stages are there
    lines: list[str] = []
    assert compress_module._structure(_recipe(model), tmp_path / "run", 1.5, True, False, lines.append) == (expected,
                                                                                                          None)
    assert bool(lines) == (expected is not None)


def test_compress_with_drop_layers_ends_with_fewer_layers(tmp_path, capsys, monkeypatch):
    """The latency model of this machine (in ghostify's cache, where the latency stage finds it) says a
    layer costs 100 ms and heads and neurons next to nothing: compress --drop-layers removes a layer, scores
    the one left again, prune allocates on it by those scores, and the report lists the kept layer."""
    model = tiny_checkpoint(tmp_path / "model")
    write_toy_dataset(tmp_path / "toy", train=48, validation=24)
    monkeypatch.setenv("GHOSTIFY_CACHE", str(tmp_path / "cache"))
    deployment = Deployment(runtime="pytorch")
    geometry = original_geometry(load_config(model))
    latency = latency_model(geometry, base=1, layer=100, head=0.01, neuron=0.001, deployment=deployment,
                            machine=machine_key("pytorch"))
    path = cache_file(geometry, deployment, latency.machine)
    path.parent.mkdir(parents=True)
    latency.save(path)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "compress", model, "-o", out, "--dataset", tmp_path / "toy", "--text-columns",
                           "sentence", "--label-column", "label", "--max-length", "32", "--max-samples", "32",
                           "--importance-samples", "16", "--rounds", "3", "--speedup", "1.5", "--runtime", "pytorch",
                           "--drop-layers")
    assert code == 0, err
    stages = {p.name.split("-", 1)[1]: p for p in (out / "stages").iterdir() if p.is_dir()}
    scores = ImportanceScores.load(stages["importance"])
    expected = plan_for_latency(scores.heads, scores.ffn, latency, latency.dense_ms() / 1.5, layer_scores=scores.layers)
    assert len(expected.layers) == 1 and "drop-layers keeps" in err
    report = json.loads((out / "report.json").read_text())
    assert (report["layers"], report["layers_of"]) == (expected.layers, 2)
    assert len(report["heads_per_layer"]) == len(report["neurons_per_layer"]) == 1
    assert load_config(report["model_dir"]).num_hidden_layers == 1
    markdown = (out / "report.md").read_text()
    assert f"Kept per layer (layer {expected.dropped[0]} dropped whole):" in markdown
    assert f"\n| {expected.layers[0]} | {report['heads_per_layer'][0]} | {report['neurons_per_layer'][0]} |" in markdown
    # prune allocated by loss scores of the one-layer model, not by weight magnitude
    assert "weight magnitude" not in err
    pruned = json.loads((stages["prune"] / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]
    assert pruned["importance"] == str(stages["rescored"] / "importance.safetensors")
    assert pruned["criterion"] == "fisher"
