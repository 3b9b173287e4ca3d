"""Retraining-free pruning (Kwon et al. 2022): the Fisher information of the gates, the search by it,
per-layer rearrangement by the Fisher block, and least-squares mask tuning."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model, steps
from ghostify.architectures import get_adapter
from ghostify.errors import GhostifyError
from ghostify.latency_model import Deployment, Geometry, LatencyModel
from ghostify.methods.pruning import ImportanceScores, compute_importance, dense_record, prune_model
from ghostify.methods.pruning.latency_allocation import predict, select_for_latency
from ghostify.methods.pruning.rearrange import gram, objective, rearrange
from ghostify.methods.pruning.tuning import _layer_calls, tune_masks
from ghostify.testing import FAMILIES, tiny_batch, tiny_checkpoint, tiny_model, write_toy_dataset

from .conftest import run_cli

TOY = {"text_columns": ("sentence",), "label_column": "label"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=96, validation=16)


@pytest.fixture(scope="module")
def scored(tmp_path_factory, toy) -> Path:
    """A tiny classifier trained a little (so its gate gradients are not all alike) and scored."""
    root = tmp_path_factory.mktemp("scored")
    model = tiny_checkpoint(root / "m")
    with pytest.warns(UserWarning):
        steps.finetune(model, root / "tuned", dataset=str(toy), **TOY, epochs=2, batch_size=16, learning_rate=1e-3,
                       max_length=32)
    steps.importance(root / "tuned", root / "scored", dataset=str(toy), **TOY, samples=48, batch_size=16, max_length=32)
    return root / "scored"


# ----------------------------------------------------------------------------------------------
# the Fisher information: per example, by hand
# ----------------------------------------------------------------------------------------------
def _gate_gradients_one_at_a_time(model, batch) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each example alone, with a scalar gate per head and per neuron of every layer put in by hooks of its
    own (not ``gates.py``): the rows (example x unit) of dL/dg for heads and neurons, per layer."""
    adapter = get_adapter(model.config)
    layers = adapter.layers(model)
    width = adapter.unit_width(model.config)
    heads_rows, ffn_rows = [[] for _ in layers], [[] for _ in layers]
    for i in range(batch["input_ids"].shape[0]):
        one = {k: v[i:i + 1] for k, v in batch.items()}
        head_gates = [torch.ones(adapter.num_units(model.config), requires_grad=True) for _ in layers]
        ffn_gates = [torch.ones(adapter.ffn_size(model.config), requires_grad=True) for _ in layers]
        handles = []
        for layer, hg, fg in zip(layers, head_gates, ffn_gates):
            paths = adapter.paths_for_layer(layer)
            handles.append(adapter.submodule(layer, paths.attention_output).register_forward_pre_hook(
                lambda m, args, hg=hg: (args[0] * hg.repeat_interleave(width),)))
            handles.append(adapter.submodule(layer, paths.ffn_down).register_forward_pre_hook(
                lambda m, args, fg=fg: (args[0] * fg,)))
        logits = model(**{k: v for k, v in one.items() if k != "labels"}).logits
        loss = torch.nn.functional.cross_entropy(logits, one["labels"])
        grads = torch.autograd.grad(loss, [*head_gates, *ffn_gates])
        for handle in handles:
            handle.remove()
        for l in range(len(layers)):
            heads_rows[l].append(grads[l])
            ffn_rows[l].append(grads[len(layers) + l])
    return [torch.stack(r) for r in heads_rows], [torch.stack(r) for r in ffn_rows]


def test_the_fisher_information_equals_a_hand_computation_per_example():
    model = tiny_model("bert", "sequence-classification")
    batch = tiny_batch(6, 11, seed=3)
    batch["labels"] = torch.tensor([0, 1, 1, 0, 1, 0])
    heads, ffn = _gate_gradients_one_at_a_time(model, batch)
    # scored in batches of 4 and 2: every example's own derivative, whatever the batch
    batches = [{k: v[:4] for k, v in batch.items()}, {k: v[4:] for k, v in batch.items()}]
    scores = compute_importance(model, get_adapter(model.config), batches)
    fisher = scores.fisher
    assert fisher.samples == 6
    for l in range(len(heads)):
        for rows, diagonal, factor, first in ((heads[l], fisher.heads[l], fisher.head_factors[l], scores.heads[l]),
                                              (ffn[l], fisher.ffn[l], fisher.ffn_factors[l], scores.ffn[l])):
            torch.testing.assert_close(diagonal, rows.pow(2).mean(0), rtol=1e-4, atol=1e-12)
            torch.testing.assert_close(first, rows.abs().mean(0), rtol=1e-4, atol=1e-12)
            # the factor is the block of the Fisher: R^T R / n = E[g g^T]
            torch.testing.assert_close(factor.T @ factor / 6, rows.T @ rows / 6, rtol=1e-4, atol=1e-12)


def test_with_more_examples_than_units_the_factor_is_square_and_the_same_block():
    rows = torch.randn(50, 7, generator=torch.Generator().manual_seed(0))
    from ghostify.methods.pruning.importance import block_factor

    factor = block_factor(rows)
    assert factor.shape == (7, 7)
    torch.testing.assert_close(factor.T @ factor, rows.T @ rows, rtol=1e-4, atol=1e-4)
    assert block_factor(rows[:5]).shape == (5, 7)  # fewer examples: the rows themselves


def test_the_block_factor_of_many_batches_keeps_their_gram_matrix_in_bounded_memory():
    """Scored examples' gradient rows are folded into their QR factor as they come: 3,000 rows of 7 units
    (40 foldings) end as one 7 x 7 factor of the same Gram matrix, the buffer never past its cap."""
    from ghostify.methods.pruning.importance import _Rows, block_factor

    rows = torch.randn(3000, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float()
    kept = _Rows(7)
    largest = 0
    for batch in rows.split(32):
        kept.add(batch)
        largest = max(largest, kept.buffer.shape[0])
    factor = block_factor(kept.all())
    assert factor.shape == (7, 7) and largest <= kept.cap == 256
    gram = rows.double().T @ rows.double()
    torch.testing.assert_close((factor.double().T @ factor.double()), gram, rtol=1e-4, atol=1e-3)
    few = _Rows(7)
    few.add(rows[:5])
    assert torch.equal(few.all(), rows[:5])  # fewer examples than the cap: the rows themselves


def test_the_fisher_scores_are_saved_and_loaded_exactly(scored):
    scores = ImportanceScores.load(scored)
    assert scores.criteria() == ("loss-gradient", "fisher") and scores.fisher.samples == 48
    again_dir = scored.parent / "again"
    again_dir.mkdir(exist_ok=True)
    scores.save(again_dir / "importance.safetensors")
    again = ImportanceScores.load(again_dir)
    for a, b in zip(scores.fisher.tensors().values(), again.fisher.tensors().values()):
        assert torch.equal(a, b)
    assert again.metadata == scores.metadata


# ----------------------------------------------------------------------------------------------
# the search by the Fisher information
# ----------------------------------------------------------------------------------------------
def test_the_fisher_search_keeps_within_the_latency_budget(scored):
    scores = ImportanceScores.load(scored)
    latency = LatencyModel(geometry=Geometry("bert", 32, 4, 37, 2), deployment=Deployment(), machine="test",
                           base_ms=1.0, layer_ms=0.5, head_ms=0.25, neuron_ms=0.02)
    heads, ffn, _, criterion = scores.ranked_by("fisher")
    assert criterion == "fisher"
    for speedup in (1.2, 1.5, 1.8, 2.1):
        target = latency.dense_ms() / speedup
        selection, predicted = select_for_latency(heads, ffn, latency, target)
        assert predicted <= target + 1e-9
        assert predicted == pytest.approx(predict(latency, [len(h) for h in selection.heads],
                                                  [len(n) for n in selection.neurons]))
        assert all(selection.heads) and all(selection.neurons)  # every layer keeps one of each


def test_prune_ranks_by_the_criterion_asked_for(tmp_path, scored):
    scores = ImportanceScores.load(scored)
    for criterion, ranking in (("fisher", scores.fisher.ffn), ("loss-gradient", scores.ffn)):
        record = steps.prune(scored, tmp_path / criterion, width="0.25", criterion=criterion, rearrange=False)
        top = [torch.argsort(r, descending=True, stable=True)[:9].tolist() for r in ranking]
        assert [sorted(kept) for kept in _kept_neurons(tmp_path / criterion, scored)] == [sorted(t) for t in top]
        assert record.history[-1]["arguments"]["criterion"] == criterion


def _kept_neurons(model: Path, original: Path) -> list[list[int]]:
    """Which of the ``original`` model's neurons a pruned tiny BERT kept, by matching its up-projection rows."""
    net = load_model(model)
    dense = load_model(original)
    kept = []
    for layer, original in zip(net.bert.encoder.layer, dense.bert.encoder.layer):
        rows = original.intermediate.dense.weight
        kept.append([int(torch.nonzero((rows == row).all(1))[0]) for row in layer.intermediate.dense.weight])
    return kept


# ----------------------------------------------------------------------------------------------
# rearrangement
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_rearrangement_never_raises_the_block_objective(seed):
    g = torch.Generator().manual_seed(seed)
    units = [4, 12, 37, 96][seed % 4]
    samples = [3, 20, 64, 500][seed % 4]
    # correlated gradients: a shared direction plus unit-specific noise of varied scale
    rows = torch.randn(samples, 1, generator=g) * torch.rand(units, generator=g) + torch.randn(samples, units, generator=g) * torch.rand(units, generator=g)
    block = gram(rows)
    diagonal = block.diagonal().float()
    for keep in range(1, units):
        start = torch.randperm(units, generator=g)[:keep].tolist()
        new = rearrange(block, start, diagonal)
        assert len(new) == keep and len(set(new)) == keep
        removed = lambda kept: [u for u in range(units) if u not in kept]  # noqa: E731
        assert objective(block, removed(new)) <= objective(block, removed(start)) * (1 + 1e-12) + 1e-12
        assert [float(diagonal[u]) for u in new] == sorted((float(diagonal[u]) for u in new), reverse=True)


def test_rearrangement_keeps_one_of_two_units_that_only_matter_together():
    # units 0 and 1 carry the same gradient (removing either alone costs little, both a lot); 2 and 3 are
    # independent and a little stronger. By the diagonal the two weakest (0 and 1) go; together they cost 4x.
    g = torch.Generator().manual_seed(0)
    shared = torch.randn(200, generator=g)
    own = torch.randn(200, 2, generator=g)
    own = own - own.mean(0)  # independent of the shared direction, on average
    rows = torch.stack([shared, shared, 1.1 * own[:, 0], 1.1 * own[:, 1]], 1)
    block = gram(rows)
    diagonal = block.diagonal().float()
    assert sorted(range(4), key=lambda u: float(diagonal[u]))[:2] == [0, 1]
    kept = rearrange(block, [2, 3], diagonal)
    best = min(itertools.combinations(range(4), 2), key=lambda gone: objective(block, list(gone)))
    gone = sorted(set(range(4)) - set(kept))
    assert objective(block, gone) == pytest.approx(objective(block, list(best))) and len({0, 1} & set(kept)) == 1


def test_prune_records_what_rearrangement_did(tmp_path, scored):
    record = steps.prune(scored, tmp_path / "r", width="0.5", rearrange=True)
    arguments = record.history[-1]["arguments"]
    for kind in ("heads", "neurons"):
        assert arguments["rearranged"][kind]["after"] <= arguments["rearranged"][kind]["before"] * (1 + 1e-9)


# ----------------------------------------------------------------------------------------------
# mask tuning
# ----------------------------------------------------------------------------------------------
def _residual_errors(student, teacher, batches) -> list[float]:
    """Per layer and sublayer, the squared error of the student's residual sums (before each LayerNorm) against
    the teacher's, each model fed its own hidden states (whole forward passes; hooks named for BERT here)."""

    def sums(model, batch):
        seen = []
        handles = []
        for layer in model.bert.encoder.layer:
            for norm in (layer.attention.output.LayerNorm, layer.output.LayerNorm):
                handles.append(norm.register_forward_pre_hook(lambda m, args: seen.append(args[0])))
        with torch.no_grad():
            model(**batch)
        for h in handles:
            h.remove()
        return seen

    errors = None
    for batch in batches:
        mask = batch["attention_mask"].bool()
        per = [float((s[mask] - t[mask]).pow(2).sum()) for s, t in zip(sums(student, batch), sums(teacher, batch))]
        errors = per if errors is None else [a + b for a, b in zip(errors, per)]
    return errors


def test_mask_tuning_lowers_the_reconstruction_error_on_held_out_examples():
    teacher = tiny_model("bert", "sequence-classification", seed=1)
    student = copy.deepcopy(teacher)
    adapter = get_adapter(student.config)
    layers = len(adapter.layers(student))
    prune_model(student, adapter, dense_record(student, adapter), [[0, 2]] * layers, [list(range(0, 37, 2))] * layers)
    untuned = copy.deepcopy(student)
    reports = tune_masks(student, teacher, [tiny_batch(8, 16, seed=s) for s in range(12)], held_out=2).sublayers
    held_out = [tiny_batch(8, 16, seed=100 + s) for s in range(4)]  # never seen by the tuning
    before, after = _residual_errors(untuned, teacher, held_out), _residual_errors(student, teacher, held_out)
    assert all(r.applied for r in reports[:2])
    assert after[0] < before[0] and after[1] < before[1]  # layer 0: the same inputs, a lower error
    assert sum(after) < sum(before)
    for r in reports:
        assert r.fit_after <= r.fit_before and (not r.applied or r.held_out_after < r.held_out_before)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_the_captured_layer_calls_keep_no_hidden_states_past_the_first_layer(family):
    """Tuning caches every layer's call for every example: the hidden states in those calls were most of its memory
    (12 MB an example of 384 tokens on MiniLM, 25 GB for 2,048 SQuAD features); each call now keeps the other
    arguments only, and still runs its layer to what the encoder computed."""
    model = tiny_model(family, "sequence-classification").eval()
    layers = get_adapter(model.config).layers(model)
    batches = [tiny_batch(4, 12, seed=s) for s in range(2)]
    with torch.no_grad():
        calls, inputs = _layer_calls(model, layers, batches)
        for row in calls:
            for call in row:
                assert not any(isinstance(a, torch.Tensor) and a.shape == inputs[0].shape and a.is_floating_point()
                               for a in call.args)
                assert "hidden_states" not in call.kwargs
        assert calls[0][0].hidden is not None and all(call.hidden is None for call in calls[0][1:])
        for l in range(len(layers) - 1):
            assert torch.allclose(calls[0][l].run(layers[l], inputs[l]), inputs[l + 1], atol=1e-6)


def _pruned_pair(seed: int = 1):
    teacher = tiny_model("bert", "sequence-classification", seed=seed)
    student = copy.deepcopy(teacher)
    adapter = get_adapter(student.config)
    layers = len(adapter.layers(student))
    prune_model(student, adapter, dense_record(student, adapter), [[0, 2]] * layers, [list(range(0, 37, 2))] * layers)
    return teacher, student


def test_tuning_is_undone_where_it_takes_the_model_away_from_its_teacher():
    """Layer-wise least squares do not see the task's head: judged by the task's distance on held-out batches, a
    tuning that does not bring the model closer is undone whole."""
    teacher, student = _pruned_pair()
    untuned = copy.deepcopy(student)
    batches = [tiny_batch(8, 16, seed=s) for s in range(8)]
    calls = []

    def worse_after_tuning(output, teacher_output, batch):  # the second judgement (after tuning) is worse
        calls.append(1)
        return 1.0 if len(calls) <= 2 else 2.0

    result = tune_masks(student, teacher, batches, held_out=2, distance=worse_after_tuning)
    assert any(r.applied for r in result.sublayers) and not result.kept
    assert result.distance_before == 1.0 and result.distance_after == 2.0
    for a, b in zip(student.state_dict().values(), untuned.state_dict().values()):
        assert torch.equal(a, b)
    # the task's own distance (KL of the logits): kept when it brings the model closer
    teacher, student = _pruned_pair()

    def kl(output, teacher_output, batch):
        p = teacher_output.logits.softmax(-1)
        return float((p * (p.log() - output.logits.log_softmax(-1))).sum(-1).mean())

    result = tune_masks(student, teacher, batches, held_out=2, distance=kl)
    assert (result.distance_after < result.distance_before) == result.kept


def test_mask_tuning_refuses_shared_layers(tmp_path, toy):
    teacher = tiny_model("albert", "sequence-classification")
    with pytest.raises(GhostifyError, match="shared layers"):
        tune_masks(copy.deepcopy(teacher), teacher, [tiny_batch(4, 8, seed=s) for s in range(4)], held_out=1)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "albert"])
def test_mask_tuning_runs_on_every_family_without_shared_layers(family):
    teacher = tiny_model(family, "sequence-classification")
    student = copy.deepcopy(teacher)
    adapter = get_adapter(student.config)
    record = dense_record(student, adapter)
    layers = len(record.heads)
    prune_model(student, adapter, record, [[0]] * layers, [list(range(record.ffn[0] // 2))] * layers)
    pad = teacher.config.pad_token_id or 0
    batches = []
    for s in range(6):
        batch = tiny_batch(4, 12, seed=s)
        batch["input_ids"][batch["attention_mask"] == 0] = pad
        batches.append(batch)
    reports = tune_masks(student, teacher, batches, held_out=1).sublayers
    assert len(reports) == 2 * layers and any(r.applied for r in reports)
    for r in reports:
        assert r.fit_after <= r.fit_before


def test_mask_tuning_reads_at_most_its_tokens():
    """Its cost grows with tokens: batches are kept while their real tokens fit the limit, never fewer than two."""
    from ghostify.methods.pruning.apply import within_tokens

    def batch(lengths):  # one row per length, padded to the longest
        mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        return {"input_ids": torch.ones_like(mask), "attention_mask": mask}

    batches = [batch([3, 5]), batch([8]), batch([2, 2, 2]), batch([4])]  # 8, 8, 6, 4 real tokens
    assert within_tokens(batches, 22) == batches[:3]  # 8 + 8 + 6 = 22 fits, the 4 more do not
    assert within_tokens(batches, 21) == batches[:2]
    assert within_tokens(batches, 1) == batches[:2]  # one batch to fit on, one held out
    assert within_tokens(batches, 10**6) == batches


def test_long_examples_are_tuned_on_fewer_of_them(tmp_path, scored, monkeypatch):
    import ghostify.methods.pruning.apply as apply

    monkeypatch.setattr(apply, "TUNE_MAX_TOKENS", 200)  # the toy sentences are 5-12 tokens: a few batches of 4
    steps.prune(scored, tmp_path / "tuned", width="0.5", tune_masks=32)
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    examples = config["ghostify"]["history"][-1]["arguments"]["tuned"]["examples"]
    assert 8 <= examples < 32 and examples % 4 == 0  # whole batches of 4 (32 // 8), their tokens within 200


def test_a_tuned_checkpoint_saves_loads_and_exports_like_any_pruned_one(tmp_path, scored, capsys):
    code, out, err = run_cli(capsys, "prune", scored, "-o", tmp_path / "tuned", "--width", "0.5", "--tune-masks", "32")
    assert code == 0, err
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    tuned = config["ghostify"]["history"][-1]["arguments"]["tuned"]
    assert tuned["examples"] == 32 and len(tuned["layers"]) == 4
    untuned = steps.prune(scored, tmp_path / "plain", width="0.5")
    assert untuned.heads == config["ghostify"]["heads"]  # the same units: tuning changes scales, not the choice
    net = load_model(tmp_path / "tuned")
    plain = load_model(tmp_path / "plain")
    batch = tiny_batch(3, 9, seed=5)
    # the whole-model guard keeps the tuned scales only where they bring the held-out outputs closer to the
    # teacher's; on a tiny model the two distances are close enough for the CPU's rounding to decide (an AMD EPYC
    # undid the tuning where this machine keeps it), so the test holds the guard to its own decision
    assert any(layer["applied"] for layer in tuned["layers"])
    with torch.no_grad():
        moved = not torch.equal(net(**batch).logits, plain(**batch).logits)
    if tuned["kept"]:
        assert tuned["distance_after"] <= tuned["distance_before"] and moved  # the scales moved the outputs
    else:
        assert tuned["distance_after"] >= tuned["distance_before"] and "the untuned scales are kept" in err
        assert (tmp_path / "tuned" / "model.safetensors").read_bytes() == \
            (tmp_path / "plain" / "model.safetensors").read_bytes()  # undone whole: the untuned weights
    # save -> load exact: write again what was loaded, load that
    from ghostify.checkpoint import model_record, save_checkpoint

    save_checkpoint(net, tmp_path / "again", model_record(net), tokenizer_source=tmp_path / "tuned")
    with torch.no_grad():
        assert torch.equal(load_model(tmp_path / "again")(**batch).logits, net(**batch).logits)
    # the scales are folded into ordinary weights: the remote-code export loads and agrees without ghostify
    # (ONNX export of a pruned shape is tested in test_export)
    result = steps.export(tmp_path / "tuned", tmp_path / "hf")
    assert result["max_difference"] <= 1e-5


def test_two_fresh_tuned_prunes_write_the_same_bytes(tmp_path, scored):
    for name in ("a", "b"):
        steps.prune(scored, tmp_path / name, width="0.5", tune_masks=32, seed=3)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


@pytest.mark.parametrize("arguments, message", [
    (["--width", "0.5", "--criterion", "taylor"], "unknown --criterion 'taylor'; choose one of fisher, loss-gradient"),
    (["--width", "0.5", "--tune-masks", "5"], "--tune-masks 5 is too few examples"),
])
def test_bad_search_settings_are_one_line(tmp_path, scored, capsys, arguments, message):
    code, out, err = run_cli(capsys, "prune", scored, "-o", tmp_path / "o", *arguments)
    assert code != 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_tuning_without_data_to_read_is_one_line(tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "m")
    code, out, err = run_cli(capsys, "prune", model, "-o", tmp_path / "o", "--width", "0.5", "--tune-masks", "64")
    assert code != 0 and "--tune-masks reads unlabelled examples of the data the scores were computed on" in err
    assert err.count("error:") == 1 and not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------------------------
# a sentence-embedding model (issue 48): mask tuning and compress's candidate choice compare pooled embeddings
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def embedding_scores(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A tiny sentence-transformers model, its label-free scores on pairs of sentences, and a latency model of it."""
    from ghostify.testing import FFN, HEADS, HIDDEN, LAYERS, tiny_sentence_transformer, write_toy_pairs

    root = tmp_path_factory.mktemp("embeddings")
    model = tiny_sentence_transformer(root / "st")
    pairs = write_toy_pairs(root / "pairs")
    steps.importance(model, root / "scored", task="embeddings", dataset=str(pairs),
                     text_columns=("sentence1", "sentence2"), label_free=True, samples=48, max_length=32)
    latency = LatencyModel(geometry=Geometry("BERT", HIDDEN, HEADS, FFN, LAYERS), deployment=Deployment(),
                           machine="test", base_ms=0.5, layer_ms=0.25, head_ms=0.25, neuron_ms=0.02)
    (root / "latency").mkdir()
    latency.save(root / "latency" / "latency.json")
    return model, root / "scored", root / "latency"


def test_mask_tuning_works_on_a_sentence_embedding_model(tmp_path, embedding_scores, capsys):
    """`prune --speedup 2 --tune-masks N` on label-free embedding scores was `unexpected KeyError: 'student'`: the
    distance of the tuned model to its teacher pools both models' outputs as their sentence-transformers model does."""
    from ghostify.tasks.embeddings import pooling_of

    model, scored, latency = embedding_scores
    code, out, err = run_cli(capsys, "prune", scored, "-o", tmp_path / "tuned", "--speedup", "2", "--latency", latency,
                             "--tune-masks", "32")
    assert code == 0, err
    tuned = json.loads((tmp_path / "tuned" / "config.json").read_text())["ghostify"]["history"][-1]["arguments"]["tuned"]
    assert tuned["examples"] == 64  # 32 pairs: two sentences each
    assert tuned["distance_before"] > 0 and tuned["distance_after"] is not None
    assert pooling_of(tmp_path / "tuned") == pooling_of(model)  # still pools as the original model does


def test_compress_candidates_are_compared_on_a_sentence_embedding_model(tmp_path, embedding_scores):
    """compress's candidate choice (`steps/fidelity.py`) loads the roles "teacher" and "model": it compares their
    pooled embeddings, 0 for the teacher itself and more for a pruned model."""
    from ghostify.steps.fidelity import teacher_gap

    model, scored, _ = embedding_scores
    steps.prune(scored, tmp_path / "half", width="0.5")
    description = ImportanceScores.load(scored).metadata["data"]
    gaps = teacher_gap([model, tmp_path / "half"], model, description, samples=16, seed=0)
    assert gaps[0] == pytest.approx(0.0, abs=1e-6) and gaps[1] > 1e-6
