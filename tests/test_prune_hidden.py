"""`ghostify prune-hidden` (the residual stream's width): channel gates at one change nothing and, zeroed with
the norms over the kept channels, equal the sliced model; the sliced model equals a BERT sliced by hand; every
family saves and loads exactly (or is refused in one line); channel scores of `ghostify importance`; exports
without ghostify (hf, ONNX fp32 and int8); a sentence-transformers model's output dimension; composition with
prune and drop-layers; distill's channel map; reproducibility; and the refusals through the bad-input harness."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from ghostify import steps
from ghostify.architectures import get_adapter
from ghostify.checkpoint import load_model, model_record
from ghostify.errors import GhostifyError
from ghostify.example_loss import per_example_loss
from ghostify.export.hf import QUIET_TRANSFORMERS, WITHOUT_GHOSTIFY
from ghostify.export.onnx import check_batches, example_batch, input_names
from ghostify.methods import METHODS, by_name, channel_origin, check_order
from ghostify.methods.hidden import PadChannels, channel_gates, kept_channels, prune_hidden
from ghostify.methods.pruning import ImportanceScores, compute_importance
from ghostify.testing import (FAMILIES, ships_head, tiny_batch, tiny_checkpoint, tiny_model, tiny_sentence_transformer,
                              write_toy_dataset)
from ghostify.training.objectives import DistillObjective

from .conftest import EVERYDAY_FAMILIES, every_day_params, run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

TOY = {"text_columns": ("sentence",), "label_column": "label"}
#: 24 of the tiny models' 32 channels (a multiple of their 4 heads), not a prefix
KEPT = [0, 1, 2, 5, 6, 7, 9, 10, 12, 13, 15, 16, 17, 18, 20, 21, 22, 23, 25, 26, 27, 28, 30, 31]


def _head(family: str) -> str:
    return "sequence-classification" if ships_head(family, "sequence-classification") else "base"


def _out(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch)[0]


def _gate(kept: list[int], width: int = 32, dtype=torch.float32) -> torch.Tensor:
    gate = torch.zeros(width, dtype=dtype)
    gate[kept] = 1
    return gate


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=32, validation=16)


# ----------------------------------------------------------------------------------------------
# gates: at one nothing changes; zeroed with the kept channels' statistics they are the sliced model
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", list(FAMILIES))
def test_channel_gates_at_one_change_nothing_and_zeroed_ones_equal_the_sliced_model(family):
    model = tiny_model(family, _head(family)).double()
    adapter = get_adapter(model.config)
    batch = tiny_batch(seq_len=12, seed=1)
    plain = _out(model, batch)
    with channel_gates(model, adapter):
        assert torch.equal(_out(model, batch), plain)
    with channel_gates(model, adapter, _gate(KEPT, dtype=torch.float64), statistics="kept"):
        masked = _out(model, batch)
    with channel_gates(model, adapter, _gate(KEPT, dtype=torch.float64)):
        zeroed = _out(model, batch)  # every norm still averages over all 32 channels, zeros included
    sliced = copy.deepcopy(model)
    prune_hidden(sliced, KEPT)
    out = _out(sliced, batch)
    if _head(family) == "base":  # the encoder's output: the cut channels are zero in the masked model
        assert not masked[..., [c for c in range(32) if c not in KEPT]].any()
        masked, zeroed = masked[..., KEPT], zeroed[..., KEPT]
    torch.testing.assert_close(masked, out, rtol=0, atol=1e-12)
    # what the norms' statistics cost: the same channels zeroed, but averaged over all of them
    assert (zeroed - out).abs().max() > 1e-6


def test_the_sliced_model_equals_a_bert_sliced_by_hand():
    model = tiny_model("bert", "sequence-classification")
    batch = tiny_batch(seed=2)
    pruned = copy.deepcopy(model)
    prune_hidden(pruned, KEPT)

    # every hidden-width weight of BertForSequenceClassification, by its own name, cut here without ghostify
    reference = copy.deepcopy(model)
    kept = torch.tensor(KEPT)
    bert = reference.bert

    def linear(old: nn.Linear, rows=None, columns=None) -> nn.Linear:
        weight, bias = old.weight.detach(), old.bias.detach()
        if rows is not None:
            weight, bias = weight[rows], bias[rows]
        if columns is not None:
            weight = weight[:, columns]
        new = nn.Linear(weight.shape[1], weight.shape[0])
        new.weight.data, new.bias.data = weight.clone(), bias.clone()
        return new

    def norm(old: nn.LayerNorm) -> nn.LayerNorm:
        new = nn.LayerNorm(len(KEPT), eps=old.eps)
        new.weight.data, new.bias.data = old.weight.detach()[kept].clone(), old.bias.detach()[kept].clone()
        return new

    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        table = getattr(bert.embeddings, name)
        setattr(bert.embeddings, name, nn.Embedding.from_pretrained(table.weight.detach()[:, kept].clone(), freeze=False,
                                                                    padding_idx=table.padding_idx))
    bert.embeddings.LayerNorm = norm(bert.embeddings.LayerNorm)
    for layer in bert.encoder.layer:
        attention = layer.attention
        for name in ("query", "key", "value"):  # the heads keep their 8 channels each
            setattr(attention.self, name, linear(getattr(attention.self, name), columns=kept))
        attention.output.dense = linear(attention.output.dense, rows=kept)
        attention.output.LayerNorm = norm(attention.output.LayerNorm)
        layer.intermediate.dense = linear(layer.intermediate.dense, columns=kept)
        layer.output.dense = linear(layer.output.dense, rows=kept)
        layer.output.LayerNorm = norm(layer.output.LayerNorm)
    bert.pooler.dense = linear(bert.pooler.dense, rows=kept, columns=kept)
    reference.classifier = linear(reference.classifier, columns=kept)
    reference.eval()

    with torch.no_grad():
        assert torch.equal(pruned(**batch).logits, reference(**batch).logits)
        assert not torch.equal(pruned(**batch).logits, model(**batch).logits)
    assert pruned.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in pruned.state_dict().items())
    assert pruned.config.hidden_size == 24 and pruned.config.attention_head_size == 8


def test_the_kept_width_is_a_multiple_of_the_head_count():
    from fractions import Fraction

    assert kept_channels(Fraction(3, 4), 384, 12) == 288 and kept_channels(Fraction(1, 2), 384, 12) == 192
    assert kept_channels(Fraction(3, 10), 384, 12) == 120  # 115.2 -> the nearest multiple of 12
    assert kept_channels(Fraction(1, 100), 32, 4) == 4  # at least one channel per head


# ----------------------------------------------------------------------------------------------
# every family: saved, loaded exactly (or refused in one line)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_prunes_saves_and_loads_exactly(family, tmp_path):
    tiny_checkpoint(tmp_path / "m", family, head=_head(family))
    with pytest.warns(UserWarning, match="weight magnitude"):
        record = steps.prune_hidden(tmp_path / "m", tmp_path / "out", hidden_width="0.5")
    entry = record.entry("hidden")
    assert len(entry["kept"]) == 16 and entry["of"] == 32 and entry["head_size"] == 8
    loaded, again = load_model(tmp_path / "out"), load_model(tmp_path / "out")
    adapter = get_adapter(loaded.config)
    assert adapter.hidden_size(loaded.config) == 16 and adapter.head_size(loaded.config) == 8
    reference = copy.deepcopy(load_model(tmp_path / "m"))
    prune_hidden(reference, entry["kept"])  # the same cut, on the model in memory
    batch = tiny_batch(seq_len=12, seed=1)
    assert torch.equal(_out(loaded, batch), _out(reference, batch))
    assert torch.equal(_out(loaded, batch), _out(again, batch))
    assert loaded.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_electra_cut_to_its_embedding_size_keeps_its_projection(tmp_path):
    # ELECTRA builds embeddings_project only when embedding_size != hidden_size; 16 of 32 is the embedding size
    tiny_checkpoint(tmp_path / "m", "electra")
    with pytest.warns(UserWarning):
        record = steps.prune_hidden(tmp_path / "m", tmp_path / "out", hidden_width="0.5")
    assert record.entry("hidden")["embedding_projection"] is True
    loaded = load_model(tmp_path / "out")
    assert loaded.electra.embeddings_project.weight.shape == (16, 16)
    with pytest.raises(GhostifyError, match="equals its embedding size"):  # nothing tells their modules apart now
        steps.prune_hidden(tmp_path / "out", tmp_path / "again", hidden_width="0.25")


def test_families_whose_hidden_width_a_module_mixes_are_refused(tmp_path):
    tiny_checkpoint(tmp_path / "conv", "deberta-v2", conv_kernel_size=3)
    with pytest.raises(GhostifyError, match="cannot prune the hidden size of this DeBERTa-v2 model: .*convolution"):
        steps.prune_hidden(tmp_path / "conv", tmp_path / "out", hidden_width="0.5")
    tiny_checkpoint(tmp_path / "albert", "albert", embedding_size=32)
    with pytest.raises(GhostifyError, match="embedding_size equals its hidden_size"):
        steps.prune_hidden(tmp_path / "albert", tmp_path / "out", hidden_width="0.5")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------
# channel scores of `ghostify importance`
# ----------------------------------------------------------------------------------------------
def test_channel_scores_equal_finite_differences_of_a_gate_per_channel():
    model = tiny_model("bert", "sequence-classification", num_labels=3).double()
    adapter = get_adapter(model.config)
    batch = tiny_batch(batch_size=4, seed=1)
    labels = torch.tensor([0, 2, 1, 2])
    scores = compute_importance(model, adapter, [dict(batch, labels=labels)])
    assert scores.hidden.shape == (32,) and scores.fisher.hidden.shape == (32,)

    def losses(channel: int, g: float) -> torch.Tensor:
        gate = torch.ones(32, dtype=torch.float64)
        gate[channel] = g
        with torch.no_grad(), channel_gates(model, adapter, gate):
            return per_example_loss(model(**batch).logits, labels, regression=False)

    eps = 1e-4
    for channel in (0, 7, 31):
        derivative = (losses(channel, 1 + eps) - losses(channel, 1 - eps)) / (2 * eps)
        assert scores.hidden[channel].item() == pytest.approx(derivative.abs().mean().item(), rel=1e-4, abs=1e-9)
        assert scores.fisher.hidden[channel].item() == pytest.approx(derivative.pow(2).mean().item(), rel=1e-4, abs=1e-12)


def test_activation_scores_are_the_mean_absolute_norm_outputs_over_real_tokens():
    model = tiny_model("bert", "sequence-classification")
    batch = tiny_batch(batch_size=3, seed=4)  # padded rows: their padding does not count
    scores = compute_importance(model, get_adapter(model.config), [dict(batch, labels=torch.tensor([0, 1, 0]))])
    total = torch.zeros(32, dtype=torch.float64)
    norms = [m for m in model.bert.modules() if isinstance(m, nn.LayerNorm)]  # the embeddings' and two per layer
    assert len(norms) == 5

    def add(module, args, output):
        nonlocal total
        total += (output.abs().double() * batch["attention_mask"][..., None]).sum((0, 1))

    handles = [n.register_forward_hook(add) for n in norms]
    with torch.no_grad():
        model(**batch)
    for handle in handles:
        handle.remove()
    torch.testing.assert_close(scores.hidden_activation, (total / 3).float())


def test_the_channel_scores_are_saved_and_prune_hidden_ranks_by_each_criterion(tmp_path, toy):
    tiny_checkpoint(tmp_path / "m", "bert")
    scores = steps.importance(tmp_path / "m", tmp_path / "scored", dataset=str(toy), **TOY, samples=16, max_length=32)
    loaded = ImportanceScores.load(tmp_path / "scored")
    assert loaded.hidden_criteria() == ("fisher", "loss-gradient", "activation")
    for criterion, values in (("fisher", scores.fisher.hidden), ("loss-gradient", scores.hidden),
                              ("activation", scores.hidden_activation)):
        assert torch.equal(loaded.hidden_ranked_by(criterion)[0], values)
        record = steps.prune_hidden(tmp_path / "scored", tmp_path / criterion, hidden_width="0.75", criterion=criterion)
        best = sorted(sorted(range(32), key=lambda c: (-float(values[c]), c))[:24])
        assert record.entry("hidden")["kept"] == best
        assert record.history[-1]["arguments"]["criterion"] == criterion
    assert by_name("hidden").settings.criterion == "loss-gradient"  # the default, by the measurement in the CHANGELOG


# ----------------------------------------------------------------------------------------------
# composition: prune (heads and neurons) and drop-layers in either order; the per-width methods after
# ----------------------------------------------------------------------------------------------
def _scored(directory: Path, family: str = "bert", layers: int = 2) -> Path:
    """A checkpoint with fixed scores for heads, neurons, layers and channels (both orders then choose alike)."""
    tiny_checkpoint(directory, family, num_hidden_layers=layers)
    generator = torch.Generator().manual_seed(5)
    ImportanceScores(heads=[torch.rand(4, generator=generator) for _ in range(layers)],
                     ffn=[torch.rand(37, generator=generator) for _ in range(layers)],
                     layers=torch.rand(layers, generator=generator),
                     hidden=torch.rand(32, generator=generator)).save(directory / "importance.safetensors")
    return directory


def test_prune_and_prune_hidden_compose_in_either_order(tmp_path):
    scored = _scored(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hand-made scores: no Fisher information
        steps.prune(scored, tmp_path / "pruned", width="0.5")
        steps.prune_hidden(tmp_path / "pruned", tmp_path / "pruned-narrow", hidden_width="0.75",
                           importance=str(scored), criterion="loss-gradient")
        steps.prune_hidden(scored, tmp_path / "narrow", hidden_width="0.75", criterion="loss-gradient")
        steps.prune(tmp_path / "narrow", tmp_path / "narrow-pruned", width="0.5", importance=str(scored))
    first, second = load_model(tmp_path / "pruned-narrow"), load_model(tmp_path / "narrow-pruned")
    assert model_record(first).heads == model_record(second).heads
    assert model_record(first).ffn == model_record(second).ffn == [19, 19]
    assert model_record(first).entry("hidden") == model_record(second).entry("hidden")
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(first(**batch).logits, second(**batch).logits)
    # the per-width methods come after: ghost modules are built at the cut width
    record = steps.attach_ghost(tmp_path / "narrow-pruned", tmp_path / "ghost")
    assert record.entry("ghost") and load_model(tmp_path / "ghost").config.hidden_size == 24
    with pytest.raises(GhostifyError, match="prune-hidden before attach-ghost"):
        check_order("hidden", model_record(load_model(tmp_path / "ghost")))


def test_drop_layers_and_prune_hidden_compose_in_either_order(tmp_path):
    scored = _scored(tmp_path / "m", layers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps.drop_layers(scored, tmp_path / "dropped", layers="1,3")
        steps.prune_hidden(tmp_path / "dropped", tmp_path / "dropped-narrow", hidden_width="0.5",
                           importance=str(scored), criterion="loss-gradient")
        steps.prune_hidden(scored, tmp_path / "narrow", hidden_width="0.5", criterion="loss-gradient")
        steps.drop_layers(tmp_path / "narrow", tmp_path / "narrow-dropped", layers="1,3")
    first, second = load_model(tmp_path / "dropped-narrow"), load_model(tmp_path / "narrow-dropped")
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(first(**batch).logits, second(**batch).logits)
    assert model_record(first).entry("dropped_layers") == model_record(second).entry("dropped_layers")


def test_pruning_the_hidden_size_twice_records_the_original_channels(tmp_path):
    scored = _scored(tmp_path / "m")
    values = ImportanceScores.load(scored).hidden
    steps.prune_hidden(scored, tmp_path / "three-quarters", hidden_width="0.75", criterion="loss-gradient")
    with pytest.warns(UserWarning, match="weight magnitude"):
        record = steps.prune_hidden(tmp_path / "three-quarters", tmp_path / "half", hidden_width="16/32")
    first = sorted(sorted(range(32), key=lambda c: (-float(values[c]), c))[:24])
    kept = record.entry("hidden")["kept"]
    assert len(kept) == 16 and set(kept) <= set(first) and record.entry("hidden")["of"] == 32
    loaded = load_model(tmp_path / "half")
    reference = copy.deepcopy(load_model(scored))
    prune_hidden(reference, kept)
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, reference(**batch).logits)


def test_the_order_rules():
    hidden = by_name("hidden")
    assert set(hidden.before) == {"grouped", "ghost", "embeddings", "references"}
    assert [m.name for m in METHODS].index("hidden") < [m.name for m in METHODS].index("pruning")
    for name in ("pruning", "dropped_layers", "sharing"):
        assert "hidden" not in by_name(name).before and name not in hidden.before


# ----------------------------------------------------------------------------------------------
# distill: each student hidden state against the teacher's kept channels, no learned map
# ----------------------------------------------------------------------------------------------
def test_distill_compares_the_student_with_the_teachers_kept_channels(tmp_path, toy):
    tiny_checkpoint(tmp_path / "teacher", "bert")
    with pytest.warns(UserWarning):
        steps.prune_hidden(tmp_path / "teacher", tmp_path / "student", hidden_width="0.75")
    student, teacher = load_model(tmp_path / "student"), load_model(tmp_path / "teacher")
    kept = model_record(student).entry("hidden")["kept"]
    assert channel_origin(model_record(student)) == (kept, 32) and channel_origin(model_record(teacher)) is None
    from ghostify.settings import DistillWeights
    from ghostify.training.layer_map import build_layer_map

    objective = DistillObjective(student, teacher, weights=DistillWeights(), layer_map=build_layer_map(2, 2), kind=None)
    assert "hidden" not in objective.projections and objective.channels.tolist() == kept
    hidden = torch.randn(2, 3, 32)
    assert torch.equal(objective._kept(hidden), hidden[..., kept])
    steps.distill(tmp_path / "teacher", tmp_path / "student", tmp_path / "out", dataset=str(toy), **TOY, epochs=1,
                  batch_size=16, max_samples=16, max_length=32)
    assert load_model(tmp_path / "out").config.hidden_size == 24


# ----------------------------------------------------------------------------------------------
# a bare encoder's output: narrower (said in one line), or padded back with --keep-output-dim
# ----------------------------------------------------------------------------------------------
def test_a_sentence_transformer_is_told_its_dimension_changes_or_keeps_it_padded(tmp_path, without_load_check):
    model = tiny_sentence_transformer(tmp_path / "st")
    with pytest.warns(UserWarning) as caught:  # no scores: weight magnitude, said too
        steps.prune_hidden(model, tmp_path / "narrow", hidden_width="0.75")
    said = [str(w.message) for w in caught if "now 24 wide instead of 32" in str(w.message)]
    assert len(said) == 1 and "--keep-output-dim" in said[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight magnitude
        record = steps.prune_hidden(model, tmp_path / "padded", hidden_width="0.75", keep_output_dim=True)
    kept = record.entry("hidden")["kept"]
    narrow, padded = load_model(tmp_path / "narrow"), load_model(tmp_path / "padded")
    batch = tiny_batch(seed=3)
    with torch.no_grad():
        small, big = narrow(**batch), padded(**batch)
    assert small.last_hidden_state.shape[-1] == 24 and big.last_hidden_state.shape[-1] == 32
    assert torch.equal(big.last_hidden_state[..., kept], small.last_hidden_state)
    assert not big.last_hidden_state[..., [c for c in range(32) if c not in kept]].any()
    assert torch.equal(big.pooler_output[..., kept], small.pooler_output)
    # the padding is one constant gather
    assert PadChannels([1, 3], 4).source == [2, 0, 2, 1]
    steps.export(tmp_path / "narrow", tmp_path / "narrow-hf", format="hf")  # its pooling told the new width
    pooling = json.loads((tmp_path / "narrow-hf" / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 24
    tiny_checkpoint(tmp_path / "classifier", "bert")
    with pytest.raises(GhostifyError, match="--keep-output-dim pads a bare encoder's output"):
        steps.prune_hidden(tmp_path / "classifier", tmp_path / "x", hidden_width="0.75", keep_output_dim=True)


@pytest.mark.slow  # two exports (~15 s): the full run's; every day the narrow model's HF export above, and the
# export command's HF, ONNX and int8 checks of a narrower BERT below
def test_a_padded_sentence_transformer_exports_at_its_old_width(tmp_path):
    model = tiny_sentence_transformer(tmp_path / "st")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight magnitude
        steps.prune_hidden(model, tmp_path / "padded", hidden_width="0.75", keep_output_dim=True)
    steps.export(tmp_path / "padded", tmp_path / "padded-hf", format="hf")
    pooling = json.loads((tmp_path / "padded-hf" / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 32
    result = steps.export(tmp_path / "padded", tmp_path / "padded-onnx", format="onnx", quantize="int8")
    assert result["outputs"] == ["last_hidden_state", "sentence_embedding"]
    assert result["max_difference"] <= 1e-4 and result["int8_difference"] <= 0.2


# ----------------------------------------------------------------------------------------------
# info, exports without ghostify, reproducibility
# ----------------------------------------------------------------------------------------------
def test_info_shows_the_hidden_width_and_the_smaller_size(tmp_path, capsys):
    tiny_checkpoint(tmp_path / "m", "bert")
    with pytest.warns(UserWarning):
        steps.prune_hidden(tmp_path / "m", tmp_path / "out", hidden_width="0.5")
    code, out, err = run_cli(capsys, "info", tmp_path / "out")
    assert code == 0, err
    assert "hidden width" in out and "16 of 32 channels (0.5), heads 8 wide" in out
    dense, narrow = steps.info(tmp_path / "m"), steps.info(tmp_path / "out")
    assert narrow["params"] < dense["params"] and narrow["flops"] < dense["flops"]
    assert narrow["hidden"]["of"] == 32 and "hidden width" in (tmp_path / "out" / "README.md").read_text()
    assert by_name("hidden").describe({"methods": {}}) == []


_LOAD_ALL = WITHOUT_GHOSTIFY + QUIET_TRANSFORMERS + """
import json
import torch
results = {}
for case in json.loads(sys.argv[1]):
    data = torch.load(case["io"])
    model = getattr(transformers, case["auto"]).from_pretrained(case["dir"], trust_remote_code=True).eval()
    with torch.no_grad():
        results[case["dir"]] = max(float((model(**b)[0] - e).abs().max()) for b, e in zip(data["batches"], data["outputs"]))
print(json.dumps(results))
"""


@pytest.mark.parametrize("families", [
    pytest.param([f for f in FAMILIES if f in EVERYDAY_FAMILIES], id="everyday"),
    pytest.param([f for f in FAMILIES if f not in EVERYDAY_FAMILIES], id="other-families", marks=pytest.mark.slow)])
def test_hf_export_of_every_family_loads_without_ghostify(families, tmp_path):
    from ghostify.export.hf import write_hf

    cases = []
    for family in families:
        work = tmp_path / family
        tiny_checkpoint(work / "m", family, head=_head(family))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps.prune(work / "m", work / "pruned", heads_width=0.5, ffn_width=0.5, allocation="global")
            steps.prune_hidden(work / "pruned", work / "narrow", hidden_width="0.75")
        net = load_model(work / "narrow")
        (work / "hf").mkdir()
        written = write_hf(net, work / "hf", source=work / "narrow")
        assert not written.stock
        config = json.loads((work / "hf" / "config.json").read_text())
        assert config[get_adapter(net.config).hidden_size_key] == 24 and "auto_map" in config
        inputs = input_names(net)
        batches = [example_batch(net.config, inputs, 3, 11, seed=1), example_batch(net.config, inputs, 2, 6, seed=2, padded=False)]
        torch.save({"batches": batches, "outputs": [_out(net, b) for b in batches]}, work / "io.pt")
        cases.append({"dir": str(work / "hf"), "auto": written.auto_class, "io": str(work / "io.pt")})
    env = {"PATH": "/usr/bin:/bin", "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", _LOAD_ALL, json.dumps(cases)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    worst = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(value <= 1e-5 for value in worst.values()), worst


@pytest.mark.parametrize("family", every_day_params(["bert", "modernbert"], ["bert"]))
def test_export_command_checks_hf_and_onnx_fp32_and_int8_parity(family, tmp_path):
    pytest.importorskip("onnxruntime")
    tiny_checkpoint(tmp_path / "m", family)
    with pytest.warns(UserWarning):
        steps.prune_hidden(tmp_path / "m", tmp_path / "narrow", hidden_width="0.5")
    assert steps.export(tmp_path / "narrow", tmp_path / "hf", format="hf")["max_difference"] <= 1e-5
    result = steps.export(tmp_path / "narrow", tmp_path / "onnx", format="onnx", quantize="int8")
    assert result["max_difference"] <= 1e-4
    # the int8 graph's error is relative to the logits' size, which differs by families by two orders of magnitude
    # (a tiny random BERT's logits are about 0.01, ModernBERT's about 1), and depends on the CPU: ONNX Runtime's
    # u8s8 integer kernel sums pairs of products in int16 and saturates on AVX2 without VNNI (ModernBERT: 0.106 of
    # 1.77 on an AMD EPYC without VNNI, 0.024 with reduce_range's 7-bit weights). What holds on any CPU: within 10%
    # of the largest logit (a broken quantisation is off by about all of it); for BERT far tighter than 0.1 was
    net = load_model(tmp_path / "narrow")
    with torch.no_grad():
        scale = max(float(net(**batch).logits.abs().max()) for batch in check_batches(net, input_names(net)))
    assert 0 < result["int8_difference"] <= 0.1 * scale, (result["int8_difference"], scale)


def test_two_fresh_runs_write_byte_identical_models(tmp_path, toy):
    tiny_checkpoint(tmp_path / "m", "bert")
    for run in ("a", "b"):
        torch.manual_seed(100 + ord(run))  # a draw the commands do not seed themselves would show
        steps.importance(tmp_path / "m", tmp_path / run / "scored", dataset=str(toy), **TOY, samples=16, max_length=32)
        steps.prune_hidden(tmp_path / run / "scored", tmp_path / run / "narrow", hidden_width="0.5")
    for name in ("scored/importance.safetensors", "narrow/model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    records = [json.loads((tmp_path / run / "narrow" / "config.json").read_text()) for run in "ab"]
    for config in records:
        config["ghostify"]["history"] = [{k: v for k, v in h.items() if k != "time"} for h in config["ghostify"]["history"]]
        for h in config["ghostify"]["history"]:
            h["arguments"] = {k: v for k, v in h["arguments"].items() if k not in ("model", "importance")}
    assert records[0] == records[1]


# ----------------------------------------------------------------------------------------------
# refusals: one line, inputs untouched, nothing written (tests/test_bad_input.py's harness)
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def hidden_world(tmp_path_factory) -> Path:
    """Inputs of the refusals below (``<name>`` in a case)."""
    root = tmp_path_factory.mktemp("prune-hidden")
    tiny_checkpoint(root / "deberta-conv", "deberta-v2", conv_kernel_size=3)
    tiny_checkpoint(root / "albert-wide", "albert", embedding_size=32)
    bare = tiny_checkpoint(root / "bare", "bert", head="base")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps.prune_hidden(bare, root / "narrow", hidden_width="0.5")
    for name, edit in (("narrow-kept99", lambda e: e.__setitem__("kept", [*e["kept"][:-1], 99])),
                       ("narrow-count", lambda e: e.__setitem__("kept", e["kept"][:-1])),
                       ("narrow-head", lambda e: e.__setitem__("head_size", 4))):
        shutil.copytree(root / "narrow", root / name)
        config = json.loads((root / name / "config.json").read_text())
        edit(config["ghostify"]["methods"]["hidden"])
        (root / name / "config.json").write_text(json.dumps(config))
    scored = tiny_checkpoint(root / "scored-24", "bert")
    ImportanceScores(heads=[torch.rand(4), torch.rand(4)], ffn=[torch.rand(37), torch.rand(37)],
                     hidden=torch.rand(24)).save(scored / "importance.safetensors")
    (root / "ghost-first.yaml").write_text(
        f"model: {bare}\nstages:\n  - attach-ghost: {{}}\n  - prune-hidden: {{hidden_width: 0.5}}\n")
    return root


M = ["prune-hidden", "{m}", "-o", "{out}"]
CASES = [
    ("no-width", M, "Missing option '--hidden-width'"),
    ("width-zero", [*M, "--hidden-width", "0"], "--hidden-width 0 is outside (0, 1]"),
    ("width-above-one", [*M, "--hidden-width", "1.5"], "--hidden-width 1.5 is outside (0, 1]"),
    ("width-word", [*M, "--hidden-width", "half"], "--hidden-width 'half' is not a number"),
    ("criterion", [*M, "--hidden-width", "0.5", "--criterion", "magnitude"], "unknown --criterion 'magnitude'"),
    ("missing-scores", [*M, "--hidden-width", "0.5", "--importance", "{world}/nope.safetensors"], "does not exist"),
    ("scores-without-channels", ["prune-hidden", "{scored}", "-o", "{out}", "--hidden-width", "0.5"],
     "have no channel scores"),
    ("stale-scores", [*M, "--hidden-width", "0.5", "--importance", "<scored-24>"],
     "are for 24 hidden channels, but the model has 32"),
    ("keep-output-dim-with-a-head", [*M, "--hidden-width", "0.5", "--keep-output-dim"],
     "--keep-output-dim pads a bare encoder's output"),
    ("wider-than-now", ["prune-hidden", "<narrow>", "-o", "{out}", "--hidden-width", "0.75"],
     "keeps 24 of the original 32 channels, but the model has 16 already"),
    ("deberta-conv", ["prune-hidden", "<deberta-conv>", "-o", "{out}", "--hidden-width", "0.5"],
     "runs a convolution across the hidden channels"),
    ("albert-equal-widths", ["prune-hidden", "<albert-wide>", "-o", "{out}", "--hidden-width", "0.5"],
     "embedding_size equals its hidden_size (32)"),
    ("after-ghost", ["prune-hidden", "{ghost}", "-o", "{out}", "--hidden-width", "0.5"],
     "prune-hidden before attach-ghost"),
    ("tampered-kept", ["info", "<narrow-kept99>"], "kept must be increasing indices of the original 32 channels"),
    ("tampered-count", ["info", "<narrow-count>"], "methods.hidden.kept lists 15 channels but the config builds 16"),
    ("tampered-head", ["info", "<narrow-head>"], "methods.hidden.head_size = 4 but the config says 8"),
    ("recipe-order", ["run", "<ghost-first.yaml>", "-o", "{out}"], "prune-hidden before attach-ghost"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_prune_hidden_input_is_one_line_and_changes_nothing(name, args, expected, world, hidden_world, tmp_path,
                                                                capsys):
    out = tmp_path / "out"
    args = [re.sub(r"<([\w.-]+)>", lambda m: str(hidden_world / m.group(1)), a) for a in args]
    _check_refused(capsys, world, out, _fill(args, world, out), expected, inputs=(hidden_world,))
