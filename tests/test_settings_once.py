"""Each rule in one home (issue 45): settings refused when they are made, before any file is read; one check and one
refusal of a speed-up beyond a latency model's reach; one reading of ``WORLD_SIZE``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ghostify import steps
from ghostify.console import launched_processes
from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.methods.dropped_layers import DropSettings
from ghostify.methods.hidden import HiddenSettings
from ghostify.methods.pruning import ImportanceScores, PruneSettings, plan_for_latency
from ghostify.recipe.compress_settings import CompressSettings
from ghostify.steps.latency_plan import check_reach
from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS, tiny_checkpoint

#: the tiny checkpoints' shape: dense 0.5 + 2 x (0.25 + 4 x 0.25 + 37 x 0.02) = 4.48 ms; at best 1.54 ms (2.91x)
TINY = LatencyModel(geometry=Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS), deployment=Deployment(), machine="test",
                    base_ms=0.5, layer_ms=0.25, head_ms=0.25, neuron_ms=0.02)

PRUNE: list[tuple[dict, str]] = [
    ({"width": "0.5", "criterion": "taylor"}, "unknown --criterion 'taylor'; choose one of fisher, loss-gradient"),
    ({"width": "0.5", "tune_masks": 5}, "--tune-masks 5 is too few examples"),
    ({"width": "0.5", "tune_masks": True}, "--tune-masks True must be a whole number of examples"),
    ({"width": "0.5", "tune_masks": -1}, "--tune-masks -1 must be a whole number of examples"),
    ({}, "no width given"),
    ({"width": "3/0"}, "--width '3/0' is not a number"),
    ({"heads_width": "0.5"}, "--ffn-width is not set"),
    ({"width": "0.5", "allocation": "best"}, "unknown --allocation 'best'"),
    ({"width": "0.5", "latency": "x"}, "--latency x is read only with --speedup"),
    ({"speedup": 2, "latency": "x", "width": "0.5"}, "--speedup and --width are mutually exclusive"),
    ({"speedup": 1, "latency": "x"}, "--speedup 1 must be a finite number above 1"),
    ({"speedup": 2}, "--speedup needs --latency"),
    ({"speedup": 2, "latency": "x", "allocation": "global"}, "--allocation global is for --width"),
]


@pytest.mark.parametrize(("settings", "message"), PRUNE, ids=[m.split(";")[0][:40] for _, m in PRUNE])
def test_prune_settings_are_refused_when_made_before_anything_is_read(settings, message, tmp_path):
    with pytest.raises(GhostifyError) as made:
        PruneSettings(**settings)
    assert message in str(made.value)
    with pytest.raises(GhostifyError) as stepped:  # the model is not even looked for
        steps.prune(tmp_path / "no-such-model", tmp_path / "out", **settings)
    assert str(stepped.value) == str(made.value) and not (tmp_path / "out").exists()


def test_what_the_settings_derive_is_checked_once_and_read_as_attributes():
    by_width = PruneSettings(heads_width="3/12", ffn_width=0.5)
    assert [str(w) for w in by_width.widths] == ["1/4", "1/2"] and by_width.target_speedup is None
    assert by_width.ranking.name == "fisher" and by_width.latency_model is None
    by_speedup = PruneSettings(speedup="2.5", latency="x", criterion="loss-gradient")
    assert by_speedup.target_speedup == 2.5 and by_speedup.widths is None and by_speedup.ranking.loss_scale
    assert str(HiddenSettings(hidden_width="3/4").width) == "3/4"
    with pytest.raises(GhostifyError, match="unknown --criterion 'weight-magnitude'; choose one of fisher, "
                                            "loss-gradient, activation"):
        HiddenSettings(hidden_width="0.5", criterion="weight-magnitude")
    with pytest.raises(GhostifyError, match="got neither of --keep and --layers"):
        DropSettings()
    with pytest.raises(GhostifyError, match="unknown --criterion 'activation'"):
        DropSettings(keep=1, criterion="activation")
    with pytest.raises(GhostifyError, match="--speedup 1 must be a finite number above 1"):
        CompressSettings(model="m", speedup=1)  # the same rule and words as prune's
    with pytest.raises(GhostifyError, match="--budget none trains nothing, so --epochs"):
        CompressSettings(model="m", speedup=2, budget="none", epochs=1)


def test_tuning_a_model_with_shared_layers_is_refused_before_its_weights_load(tmp_path, monkeypatch):
    model = tiny_checkpoint(tmp_path / "albert", "albert")
    layers = 1  # ALBERT's config shares one layer over its 3 steps
    ImportanceScores(heads=[torch.rand(HEADS)] * layers, ffn=[torch.rand(FFN)] * layers).save(
        model / "importance.safetensors")

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were read")

    import importlib

    monkeypatch.setattr(importlib.import_module("ghostify.steps.apply_method"), "load_model", no_weights)
    with pytest.raises(GhostifyError, match="--tune-masks needs layers that run once each, but this ALBERT model runs "
                                            "shared layers"):
        steps.prune(model, tmp_path / "out", width="0.5", tune_masks=32)
    assert not (tmp_path / "out").exists()


def test_one_refusal_of_a_speedup_out_of_reach(tmp_path):
    """``prune --speedup``'s check, the allocation itself and compress's check say the same words."""
    model = tiny_checkpoint(tmp_path / "m")
    (tmp_path / "latency").mkdir()
    TINY.save(tmp_path / "latency" / "latency.json")
    with pytest.raises(GhostifyError) as pruned:
        steps.prune(model, tmp_path / "out", speedup=3, latency=str(tmp_path / "latency"))
    with pytest.raises(GhostifyError) as compressed:
        check_reach(model, TINY, 3, layers=False, hidden=False)
    scores = [torch.rand(HEADS)] * LAYERS, [torch.rand(FFN)] * LAYERS
    with pytest.raises(GhostifyError) as allocated:
        plan_for_latency(*scores, TINY, TINY.dense_ms() / 3)
    said = "--speedup 3 is out of reach: even 1 head and 1 FFN neuron per layer predict 1.54 ms, a speed-up of at " \
           "most 2.91x over the dense 4.48 ms on onnx-int8, batch 1 x 128 tokens, 1 thread(s); ask for 2.9 or less"
    assert str(allocated.value) == said
    assert str(pruned.value) == said + ", or drop layers first (`ghostify drop-layers`)"
    assert str(compressed.value) == said + ", or let whole layers (--drop-layers) go"  # the tiny BERT's layers may go


@pytest.mark.parametrize(("value", "processes"), [(None, 1), ("", 1), (" ", 1), ("4", 4)])
def test_the_launched_processes_are_read_once(value, processes, monkeypatch):
    if value is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", value)
    assert launched_processes() == processes


def test_a_world_size_that_is_no_number_is_one_line(monkeypatch, capsys):
    from .conftest import run_cli

    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(GhostifyError, match="WORLD_SIZE='two' is not a number of processes"):
        launched_processes()
    code, _, err = run_cli(capsys, "info", str(Path("no-such-model")))
    assert code != 0 and "WORLD_SIZE='two'" in err and "Traceback" not in err
