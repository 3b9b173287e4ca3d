"""`ghostify drop-layers` (depth pruning): the kept layers equal a model sliced by hand, layer scores
from `ghostify importance`, every family saved and loaded exactly (or refused in one line), the
order rules, composition with prune and attach-ghost, distill's layer map, export, reproducibility,
a recipe stage, and the refusals through the bad-input harness."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from ghostify import recipe as recipes
from ghostify import steps
from ghostify.architectures import get_adapter
from ghostify.checkpoint import load_model, model_record
from ghostify.errors import GhostifyError
from ghostify.example_loss import per_example_loss
from ghostify.methods import by_name, check_order
from ghostify.methods.dropped_layers import DropSettings, by_scores, evenly_spaced
from ghostify.methods.pruning import ImportanceScores, compute_importance
from ghostify.methods.pruning.importance import layer_gates
from ghostify.testing import FAMILIES, tiny_batch, tiny_checkpoint, tiny_model, write_toy_dataset
from ghostify.training.layer_map import build_layer_map, kept_layers

from .conftest import run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

TOY = {"text_columns": ("sentence",), "label_column": "label"}

#: where each family keeps its layer list and its layer count, written here by hand (not read from
#: the adapters) so that the hand-sliced reference checks the adapters' facts too
LAYER_LIST = {"distilbert": "transformer.layer", "modernbert": "layers", "eurobert": "layers", "gte": "layers",
              "nomic_bert": "layers", "jina_embeddings_v3": "layers"}
COUNT_KEY = {"distilbert": "n_layers"}


def _deep(family: str, layers: int) -> dict[str, int]:
    return {COUNT_KEY.get(family, "num_hidden_layers"): layers}


def _sliced(model: nn.Module, family: str, kept: list[int]) -> nn.Module:
    """A copy of ``model`` whose layer list was sliced by hand (and its config's count set)."""
    reference = copy.deepcopy(model)
    parent_path, _, name = ("encoder.layer" if family not in LAYER_LIST else LAYER_LIST[family]).rpartition(".")
    parent = reference.base_model.get_submodule(parent_path) if parent_path else reference.base_model
    setattr(parent, name, nn.ModuleList([getattr(parent, name)[i] for i in kept]))
    setattr(reference.config, COUNT_KEY.get(family, "num_hidden_layers"), len(kept))
    return reference


def _hidden(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).last_hidden_state


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=32, validation=16)


# ----------------------------------------------------------------------------------------------
# the kept layers are the model's own layers, and nothing else changes
# ----------------------------------------------------------------------------------------------
def test_kept_layers_equal_a_model_sliced_by_hand(tmp_path):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    record = steps.drop_layers(tmp_path / "m", tmp_path / "out", layers="3,1")  # any order: kept in model order
    assert record.entry("dropped_layers") == {"kept": [1, 3], "of": 4, "format": 1}
    dropped, original = load_model(tmp_path / "out"), load_model(tmp_path / "m")
    reference = _sliced(original, "bert", [1, 3])
    batch = tiny_batch(seed=2)
    with torch.no_grad():
        assert torch.equal(dropped(**batch).logits, reference(**batch).logits)
        assert not torch.equal(dropped(**batch).logits, original(**batch).logits)
    assert dropped.config.num_hidden_layers == 2
    assert dropped.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in dropped.state_dict().items())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_drops_saves_and_loads_exactly_or_is_refused_in_one_line(family, tmp_path):
    tiny_checkpoint(tmp_path / "m", family, head="base", **_deep(family, 3))
    if family == "albert":  # its config shares one layer over every step: nothing of its own to drop
        with pytest.raises(GhostifyError, match="cannot drop layers of an ALBERT model"):
            steps.drop_layers(tmp_path / "m", tmp_path / "out", layers="0,2")
        assert not (tmp_path / "out").exists()
        return
    steps.drop_layers(tmp_path / "m", tmp_path / "out", layers="0,2")
    loaded = load_model(tmp_path / "out")
    reference = _sliced(load_model(tmp_path / "m"), family, [0, 2])
    assert loaded.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in loaded.state_dict().items())
    batch = tiny_batch(seq_len=12, seed=1)  # longer than ModernBERT's window: its layer types matter
    assert torch.equal(_hidden(loaded, batch), _hidden(reference, batch))
    assert model_record(loaded).heads == model_record(reference).heads


def test_modernbert_keeps_each_kept_layers_attention_pattern(tmp_path):
    # layers alternate global / sliding window: keeping 0 and 2 keeps two global layers, which a
    # config with the first two entries of the old pattern would build as global and sliding
    tiny_checkpoint(tmp_path / "m", "modernbert", head="base")
    steps.drop_layers(tmp_path / "m", tmp_path / "out", layers="0,2")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["layer_types"] == ["full_attention", "full_attention"] and config["num_hidden_layers"] == 2


def test_a_family_whose_first_layer_is_built_apart_keeps_it_whatever_the_scores():
    assert by_scores([0.1, 0.9, 0.5, 0.7], 2, first_fixed=False) == [1, 3]
    assert by_scores([0.1, 0.9, 0.5, 0.7], 2, first_fixed=True) == [0, 1]
    assert by_scores([0.5, 0.5, 0.5], 2, first_fixed=False) == [0, 1]  # ties: the earlier layer


def test_without_scores_the_kept_layers_are_evenly_spaced_as_distilbert(tmp_path):
    assert evenly_spaced(6, 12) == [0, 2, 4, 7, 9, 11]  # DistilBERT's initialisation from BERT-base
    assert evenly_spaced(3, 6) == [0, 3, 5]
    assert evenly_spaced(1, 6) == [0] and evenly_spaced(4, 4) == [0, 1, 2, 3]
    assert all(len(set(evenly_spaced(n, 12))) == n for n in range(1, 13))
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    with pytest.warns(UserWarning, match="evenly spaced layers 0,2,3 of 4"):
        record = steps.drop_layers(tmp_path / "m", tmp_path / "out", keep=3)
    assert record.entry("dropped_layers")["kept"] == [0, 2, 3]
    assert record.history[-1]["arguments"]["criterion"] == "evenly-spaced"


def test_dropping_twice_records_the_original_layers(tmp_path):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "three", layers="0,2,3")
    record = steps.drop_layers(tmp_path / "three", tmp_path / "two", layers="1,2")
    assert record.entry("dropped_layers") == {"kept": [2, 3], "of": 4, "format": 1}
    reference = _sliced(load_model(tmp_path / "m"), "bert", [2, 3])
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(load_model(tmp_path / "two")(**batch).logits, reference(**batch).logits)


def test_keeping_every_layer_warns_that_nothing_is_dropped():
    check = by_name("dropped_layers").check
    config = tiny_model("bert").config
    with pytest.warns(UserWarning, match="keeps all 2 layers: nothing is dropped"):
        check(config, None, DropSettings(keep=2))
    with pytest.warns(UserWarning, match="nothing is dropped"):
        check(config, None, DropSettings(layers="1,0"))


# ----------------------------------------------------------------------------------------------
# layer scores: a gate on each layer's whole update, written by `ghostify importance`
# ----------------------------------------------------------------------------------------------
def test_layer_scores_equal_finite_differences_of_a_gate_on_the_layer():
    model = tiny_model("bert", "sequence-classification", num_labels=3, num_hidden_layers=3).double()
    adapter = get_adapter(model.config)
    batch = tiny_batch(batch_size=4, seed=1)
    labels = torch.tensor([0, 2, 1, 2])
    scores = compute_importance(model, adapter, [dict(batch, labels=labels)])
    assert scores.layers is not None and scores.layers.shape == (3,)

    def losses(layer: int, g: float) -> torch.Tensor:
        # written out here: output x + g·(layer(x) - x) on one layer
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            mixed = args[0] + g * (out - args[0])
            return (mixed, *output[1:]) if isinstance(output, tuple) else mixed

        handle = model.bert.encoder.layer[layer].register_forward_hook(hook)
        try:
            with torch.no_grad():
                return per_example_loss(model(**batch).logits, labels, regression=False)
        finally:
            handle.remove()

    eps = 1e-4
    for layer in range(3):
        derivative = (losses(layer, 1 + eps) - losses(layer, 1 - eps)) / (2 * eps)
        assert scores.layers[layer].item() == pytest.approx(derivative.abs().mean().item(), rel=1e-4, abs=1e-9)


def test_layer_gates_at_one_change_no_output_bit():
    model = tiny_model("bert", "sequence-classification")
    batch = tiny_batch()
    layers = get_adapter(model.config).layers(model)
    with torch.no_grad():
        plain = model(**batch).logits
        with layer_gates(layers) as gates:
            gates[:] = [torch.ones(3) for _ in layers]
            gated = model(**batch).logits
    assert torch.equal(plain, gated)


def test_label_free_scores_include_layers():
    model = tiny_model("bert", "sequence-classification")
    scores = compute_importance(model, get_adapter(model.config), [tiny_batch(batch_size=4)], label_free=True)
    assert torch.isfinite(scores.layers).all() and (scores.layers > 0).all()


def _identity_layer_checkpoint(directory: Path, layer: int) -> Path:
    """A pre-norm model of 4 layers whose layer ``layer`` adds nothing: zero output projections
    make both residual branches zero, so the layer is exactly the identity."""
    model = tiny_model("roberta-prelayernorm", "sequence-classification", num_hidden_layers=4)
    block = model.base_model.encoder.layer[layer]
    with torch.no_grad():
        for linear in (block.attention.output.dense, block.output.dense):
            linear.weight.zero_()
            linear.bias.zero_()
    model.save_pretrained(directory)
    from ghostify.testing import tiny_tokenizer

    tiny_tokenizer(directory)
    return directory


def test_an_identity_layer_scores_lowest_and_is_dropped_first(tmp_path, toy):
    model = _identity_layer_checkpoint(tmp_path / "m", layer=2)
    scores = steps.importance(model, tmp_path / "scored", dataset=str(toy), **TOY, samples=16, max_length=32)
    assert scores.layers[2] == 0 and (scores.layers[[0, 1, 3]] > 0).all()
    assert scores.fisher.layers[2] == 0 and (scores.fisher.layers[[0, 1, 3]] > 0).all()
    assert ImportanceScores.load(tmp_path / "scored").layers.tolist() == scores.layers.tolist()  # in the file
    record = steps.drop_layers(tmp_path / "scored", tmp_path / "out", keep=3)
    assert record.entry("dropped_layers")["kept"] == [0, 1, 3]
    assert record.history[-1]["arguments"]["criterion"] == "fisher"
    batch = tiny_batch()
    with torch.no_grad():  # dropping an identity layer changes nothing
        torch.testing.assert_close(load_model(tmp_path / "out")(**batch).logits, load_model(model)(**batch).logits)


# ----------------------------------------------------------------------------------------------
# order rules and composition
# ----------------------------------------------------------------------------------------------
def test_drop_layers_comes_before_the_per_layer_methods():
    assert set(by_name("dropped_layers").before) == {"ghost", "grouped", "references"}  # and sharing: refused by its check
    for name in ("pruning", "embeddings"):
        assert name not in by_name("dropped_layers").before and "dropped_layers" not in by_name(name).before


def test_prune_and_drop_compose_in_either_order_then_attach_ghost(tmp_path):
    # weight-magnitude scores and a uniform width are per layer: pruning then dropping equals dropping then pruning
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no scores: magnitude pruning, said in a warning
        steps.apply_method("pruning", tmp_path / "m", tmp_path / "pruned", width="0.5")
        steps.drop_layers(tmp_path / "pruned", tmp_path / "pruned-dropped", layers="1,3")
        steps.drop_layers(tmp_path / "m", tmp_path / "dropped", layers="1,3")
        steps.apply_method("pruning", tmp_path / "dropped", tmp_path / "dropped-pruned", width="0.5")
    first, second = load_model(tmp_path / "pruned-dropped"), load_model(tmp_path / "dropped-pruned")
    pruned = model_record(load_model(tmp_path / "pruned"))
    assert model_record(first).heads == model_record(second).heads == [pruned.heads[i] for i in (1, 3)]
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(first(**batch).logits, second(**batch).logits)
    for source in ("pruned-dropped", "dropped-pruned"):
        record = steps.apply_method("ghost", tmp_path / source, tmp_path / f"{source}-ghost")
        ghosted = load_model(tmp_path / f"{source}-ghost")
        assert record.entry("dropped_layers")["kept"] == [1, 3] and record.entry("ghost")
        assert len(get_adapter(ghosted.config).layers(ghosted)) == 2
    with pytest.raises(GhostifyError, match="drop-layers before attach-ghost"):
        check_order("dropped_layers", model_record(ghosted))


def test_layers_dropped_before_sharing_share_and_load(tmp_path):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "dropped", layers="0,1,3")
    record = steps.apply_method("sharing", tmp_path / "dropped", tmp_path / "shared", groups=1)
    shared = load_model(tmp_path / "shared")
    assert get_adapter(shared.config).layer_applications(shared) == [3] and record.entry("dropped_layers")["kept"] == [0, 1, 3]


def test_prune_refuses_scores_of_the_model_before_its_layers_were_dropped(tmp_path, toy):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.importance(tmp_path / "m", tmp_path / "scored", dataset=str(toy), **TOY, samples=16, max_length=32)
    steps.drop_layers(tmp_path / "scored", tmp_path / "dropped", keep=2)
    assert not (tmp_path / "dropped" / "importance.safetensors").exists()  # no stale scores travel on
    with pytest.raises(GhostifyError, match="for a model of 4 layers, but the model has 2; re-run `ghostify"):
        steps.apply_method("pruning", tmp_path / "dropped", tmp_path / "out", width="0.5",
                           importance=str(tmp_path / "scored"))


# ----------------------------------------------------------------------------------------------
# distill: each student layer learns from the teacher layer it was
# ----------------------------------------------------------------------------------------------
def test_the_layer_map_follows_the_kept_layers():
    assert build_layer_map(2, 4, kept=[1, 3]).pairs == ((1, 2), (2, 4))
    assert build_layer_map(3, 12, kept=[0, 5, 6]).pairs == ((1, 1), (2, 6), (3, 7))
    assert build_layer_map(2, 4).pairs == ((1, 2), (2, 4))  # without: uniform
    assert build_layer_map(2, 4, "1:1,2:2", kept=[1, 3]).pairs == ((1, 1), (2, 2))  # an explicit map wins
    assert build_layer_map(2, 4, kept=[1, 2, 3]).pairs == ((1, 2), (2, 4))  # not this student's: ignored


def test_distill_maps_a_dropped_student_to_the_teacher_layers_it_kept(tmp_path, toy):
    tiny_checkpoint(tmp_path / "teacher", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "teacher", tmp_path / "student", layers="0,1")
    student, teacher = load_model(tmp_path / "student"), load_model(tmp_path / "teacher")
    assert kept_layers(student, 4) == [0, 1] and kept_layers(student, 6) is None and kept_layers(teacher, 4) is None
    steps.distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "out", dataset=str(toy), **TOY, epochs=1,
                  batch_size=16, max_samples=16, max_length=32, attention_weight=1.0)
    history = model_record(load_model(tmp_path / "out")).history
    assert history[-1]["arguments"]["layer_map"] == "1:1,2:2"  # uniform would be 1:2,2:4


# ----------------------------------------------------------------------------------------------
# info, export, reproducibility, recipes
# ----------------------------------------------------------------------------------------------
def test_info_says_which_layers_were_kept(tmp_path, capsys):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "out", layers="0,2")
    code, out, err = run_cli(capsys, "info", tmp_path / "out")
    assert code == 0, err
    assert "dropped layers" in out and "kept 0,2 of 4" in out
    assert by_name("dropped_layers").describe({"methods": {}}) == []


def test_onnx_export_of_a_dropped_model_matches_pytorch(tmp_path):
    pytest.importorskip("onnxruntime")
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "dropped", layers="1,2")
    result = steps.export(tmp_path / "dropped", tmp_path / "onnx", format="onnx")
    assert result["max_difference"] <= 1e-4


def test_hf_export_of_a_dropped_model_loads_without_ghostify(tmp_path, without_load_check):
    """Loaded by transformers alone in a fresh Python (this test's own check, not the export's)."""
    from .test_export import _LOAD_ALL

    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "dropped", layers="1,2")
    steps.export(tmp_path / "dropped", tmp_path / "hf", format="hf")
    batch = tiny_batch()
    with torch.no_grad():
        logits = load_model(tmp_path / "dropped")(**batch).logits
    torch.save({"batches": [batch], "logits": [logits]}, tmp_path / "io.pt")
    case = {"dir": str(tmp_path / "hf"), "auto": "AutoModelForSequenceClassification", "io": str(tmp_path / "io.pt")}
    env = {"PATH": "/usr/bin:/bin", "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    loaded = subprocess.run([sys.executable, "-c", _LOAD_ALL, json.dumps([case])], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert json.loads(loaded.stdout.strip().splitlines()[-1])[case["dir"]]["worst"] <= 1e-5


def test_a_model_with_only_dropped_layers_exports_as_a_stock_checkpoint(tmp_path, without_load_check):
    # (a stock export's load with plain transformers: tests/test_export.py's stock checkpoint, every day)
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    steps.drop_layers(tmp_path / "m", tmp_path / "dropped", layers="1,2")
    result = steps.export(tmp_path / "dropped", tmp_path / "hf", format="hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert result["stock"] and "auto_map" not in config and config["num_hidden_layers"] == 2


def test_two_fresh_runs_write_byte_identical_models(tmp_path, toy):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    for run in ("a", "b"):
        torch.manual_seed(100 + ord(run))  # a draw the commands do not seed themselves would show
        steps.importance(tmp_path / "m", tmp_path / run / "scored", dataset=str(toy), **TOY, samples=16, max_length=32)
        steps.drop_layers(tmp_path / run / "scored", tmp_path / run / "dropped", keep=2)
    for name in ("scored/importance.safetensors", "dropped/model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    records = [json.loads((tmp_path / run / "dropped" / "config.json").read_text())["ghostify"] for run in "ab"]
    for record in records:
        record["history"] = [{k: v for k, v in h.items() if k != "time"} for h in record["history"]]
        for h in record["history"]:
            h["arguments"] = {k: v for k, v in h["arguments"].items() if k not in ("model", "importance")}
    assert records[0] == records[1]


RECIPE = """
model: {model}
data: {{dataset: {data}, text_columns: [sentence], label_column: label, max_length: 32}}
seed: 3
stages:
  - importance: {{samples: 16}}
  - drop-layers: {{keep: 2}}
  - prune: {{width: '1/2'}}
  - distill: {{teacher: {model}, max_samples: 16, epochs: 1, batch_size: 16}}
  - eval: {{}}
"""


def test_a_recipe_stage_drops_layers(tmp_path, toy):
    tiny_checkpoint(tmp_path / "m", "bert", num_hidden_layers=4)
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(model=tmp_path / "m", data=toy))
    recipe = recipes.load(path)
    report = recipes.run(recipe, tmp_path / "run")
    assert [row["status"] for row in report["stages"]] == ["ran"] * len(yaml.safe_load(path.read_text())["stages"])
    dropped = next(p for p in (tmp_path / "run").iterdir() if p.name.endswith("drop-layers"))
    assert model_record(load_model(dropped)).entry("dropped_layers")["of"] == 4
    distilled = next(p for p in (tmp_path / "run").iterdir() if p.name.endswith("distill"))
    record = model_record(load_model(distilled))
    assert len(record.heads) == 2 and record.heads_per_layer == [2, 2]


# ----------------------------------------------------------------------------------------------
# refusals: one line, inputs untouched, nothing written (tests/test_bad_input.py's harness)
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def drop_world(tmp_path_factory) -> Path:
    """Inputs of the refusals below (``<name>`` in a case)."""
    root = tmp_path_factory.mktemp("drop-layers")
    deep = tiny_checkpoint(root / "deep", "bert", num_hidden_layers=4)
    shutil.copytree(deep, root / "deep-scored")
    ImportanceScores(heads=[torch.rand(4) for _ in range(4)], ffn=[torch.rand(37) for _ in range(4)],
                     layers=torch.rand(4)).save(root / "deep-scored" / "importance.safetensors")
    tiny_checkpoint(root / "albert", "albert")
    tiny_checkpoint(root / "modernbert", "modernbert")
    tiny_checkpoint(root / "deberta-conv", "deberta-v2", num_hidden_layers=3, conv_kernel_size=3)
    steps.apply_method("sharing", deep, root / "shared", groups=2)
    steps.drop_layers(deep, root / "dropped", layers="0,2")
    for name, kept in (("dropped-kept99", [0, 99]), ("dropped-count", [0, 1, 2])):
        shutil.copytree(root / "dropped", root / name)
        config = json.loads((root / name / "config.json").read_text())
        config["ghostify"]["methods"]["dropped_layers"]["kept"] = kept
        (root / name / "config.json").write_text(json.dumps(config))
    (root / "ghost-first.yaml").write_text(
        f"model: {deep}\nstages:\n  - attach-ghost: {{}}\n  - drop-layers: {{keep: 2}}\n")
    return root


M = ["drop-layers", "{m}", "-o", "{out}"]
CASES = [
    ("both", [*M, "--keep", "1", "--layers", "0"], "got both of --keep and --layers; give one"),
    ("neither", M, "got neither of --keep and --layers; give one"),
    ("keep-zero", [*M, "--keep", "0"], "--keep 0 is not a layer count of this 2-layer model; give 1 to 2"),
    ("keep-too-many", [*M, "--keep", "3"], "--keep 3 is not a layer count of this 2-layer model; give 1 to 2"),
    ("layer-beyond", [*M, "--layers", "0,5"], "layer 5 does not exist; the model has 2 layers (0 to 1)"),
    ("layer-negative", [*M, "--layers=-1"], "layer -1 does not exist"),
    ("layer-word", [*M, "--layers", "0,one"], "'one' is not a layer index"),
    ("layer-empty", [*M, "--layers", ""], "'' is not a layer index"),
    ("layer-twice", [*M, "--layers", "1,1"], "names layer 1 twice"),
    ("importance-with-layers", [*M, "--layers", "0", "--importance", "{scored}"], "is not used with --layers 0"),
    ("missing-scores", [*M, "--keep", "1", "--importance", "{world}/nope.safetensors"], "does not exist"),
    ("scores-without-layers", ["drop-layers", "{scored}", "-o", "{out}", "--keep", "1"], "have no layer scores"),
    ("stale-scores", ["drop-layers", "<deep>", "-o", "{out}", "--keep", "2", "--importance", "{scored}"],
     "for a model of 2 layers, but the model has 4"),
    ("albert", ["drop-layers", "<albert>", "-o", "{out}", "--keep", "1"], "cannot drop layers of an ALBERT model"),
    ("after-share", ["drop-layers", "<shared>", "-o", "{out}", "--keep", "1"], "drop-layers before share-layers"),
    ("after-ghost", ["drop-layers", "{ghost}", "-o", "{out}", "--keep", "1"], "drop-layers before attach-ghost"),
    ("modernbert-first", ["drop-layers", "<modernbert>", "-o", "{out}", "--layers", "1,2"],
     "drops layer 0, but ModernBERT builds its first layer without an attention norm; keep layer 0"),
    ("deberta-conv-first", ["drop-layers", "<deberta-conv>", "-o", "{out}", "--layers", "1"],
     "runs a convolution after its first layer"),
    ("prune-stale-scores", ["prune", "<dropped>", "-o", "{out}", "--width", "0.5", "--importance", "<deep-scored>"],
     "for a model of 4 layers, but the model has 2"),
    ("tampered-kept", ["info", "<dropped-kept99>"], "methods.dropped_layers.kept = [0, 99]"),
    ("tampered-count", ["info", "<dropped-count>"], "methods.dropped_layers.kept lists 3 layers but the config builds 2"),
    ("recipe-order", ["run", "<ghost-first.yaml>", "-o", "{out}"], "drop-layers before attach-ghost"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_drop_layers_input_is_one_line_and_changes_nothing(name, args, expected, world, drop_world, tmp_path,
                                                              capsys):
    import re

    out = tmp_path / "out"
    args = [re.sub(r"<([\w.-]+)>", lambda m: str(drop_world / m.group(1)), a) for a in args]
    _check_refused(capsys, world, out, _fill(args, world, out), expected, inputs=(drop_world,))
