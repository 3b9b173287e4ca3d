"""factorize-embeddings (ALBERT): V x H word embeddings -> V x E · E x H from the truncated SVD."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from ghostify import load_model, save_checkpoint
from ghostify.checkpoint import model_record
from ghostify.methods.embeddings.apply import embeddings_record, factorize_embeddings
from ghostify.methods.embeddings.modules import FactorizedDecoder, FactorizedEmbedding
from ghostify.testing import tiny_batch, tiny_checkpoint, tiny_model

from .conftest import ALL_FAMILIES, run_cli


def _factorized(family: str, rank: int | None = None, head: str = "masked-lm"):
    model = tiny_model(family, head)
    original = model.get_input_embeddings().weight.detach().clone()
    result = factorize_embeddings(model, rank or min(original.shape))
    return model, original, result


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_full_rank_svd_reproduces_the_embeddings_and_the_outputs(family):
    batch = tiny_batch()
    for head in ("masked-lm", "sequence-classification"):
        reference = tiny_model(family, head)
        expected = reference(**batch).logits
        model, original, result = _factorized(family, head=head)
        embedding = model.get_input_embeddings()
        assert isinstance(embedding, FactorizedEmbedding)
        assert embedding.factor.shape == (original.shape[0], result.rank)
        assert embedding.projection.shape == (result.rank, original.shape[1])
        torch.testing.assert_close(embedding.weight, original, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(model(**batch).logits, expected, atol=1e-5, rtol=1e-4)
        assert result.error < 1e-6


def test_low_rank_is_the_best_rank_e_approximation():
    """Eckart–Young: A·B equals U_E S_E V_Eᵀ, and its error is the tail of the singular values."""
    model, original, result = _factorized("bert", rank=5)
    u, s, vh = torch.linalg.svd(original.double(), full_matrices=False)
    best = (u[:, :5] * s[:5]) @ vh[:5]
    product = model.get_input_embeddings().weight.detach().double()
    torch.testing.assert_close(product, best, atol=1e-5, rtol=1e-4)
    expected_error = float(s[5:].square().sum().sqrt() / s.square().sum().sqrt())
    assert result.error == pytest.approx(expected_error, rel=1e-6)
    measured = float((original.double() - product).norm() / original.double().norm())
    assert measured == pytest.approx(expected_error, rel=1e-4)
    # any other rank-5 matrix is further away, e.g. the projection on 5 random directions
    q, _ = torch.linalg.qr(torch.randn(original.shape[1], 5, dtype=torch.float64))
    other = original.double() @ q @ q.T
    assert float((original.double() - other).norm() / original.double().norm()) > expected_error
    assert result.params_before == 99 * 32 and result.params_after == 5 * (99 + 32)


def test_refactorising_equals_factorising_the_original_at_the_lower_rank():
    once, original, _ = _factorized("bert", rank=6)
    twice, _, _ = _factorized("bert", rank=12)
    result = factorize_embeddings(twice, 6)
    torch.testing.assert_close(twice.get_input_embeddings().weight, once.get_input_embeddings().weight, atol=1e-5, rtol=1e-4)
    assert result.params_before == 12 * (99 + 32) and result.params_after == 6 * (99 + 32)


def test_bert_base_at_rank_128():
    """The README's figures: BERT-base's 30522 x 768 word embeddings at E = 128 (random init)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig())
    result = factorize_embeddings(model, 128)
    assert result.params_before == 23_440_896  # 30522 x 768
    assert result.params_after == 4_005_120  # 30522 x 128 + 128 x 768
    assert result.params_saved == 19_435_776
    # a random N(0, 0.02) matrix has a flat spectrum: 128 of 768 directions keep ~21% of its energy
    assert result.error == pytest.approx(0.8904, abs=0.002)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_the_mlm_decoder_uses_the_same_factors(family):
    model, _, _ = _factorized(family, rank=6)
    embedding, decoder = model.get_input_embeddings(), model.get_output_embeddings()
    if family == "deberta-v2" and not model.config.legacy:
        pytest.skip("DeBERTa's non-legacy head reads word_embeddings.weight itself")
    if not tiny_model(family, "masked-lm").config.tie_word_embeddings:
        # an untied decoder (EuroBERT) has weights of its own: it stays a dense layer
        assert not isinstance(decoder, FactorizedDecoder) and decoder.weight is not embedding.weight
        return
    assert isinstance(decoder, FactorizedDecoder) and decoder.embedding is embedding
    # the factors are parameters of the model once, not copies
    params = [p for p in model.parameters() if p is embedding.factor or p is embedding.projection]
    assert len(params) == 2
    h = torch.randn(2, 3, embedding.embedding_dim)
    expected = (h @ embedding.projection.T) @ embedding.factor.T + decoder.bias
    torch.testing.assert_close(decoder(h), expected)
    # transformers' tie must not put a dense matrix back
    model.tie_weights()
    model.tie_weights(recompute_mapping=False)
    assert model.get_output_embeddings() is decoder and decoder.embedding is model.get_input_embeddings()
    assert not any(k.endswith(".weight") and "word_embeddings" in v for k, v in model.all_tied_weights_keys.items())
    # one training step moves the factors through both the input and the output
    batch = tiny_batch()
    model.train()
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    assert embedding.factor.grad is not None and embedding.projection.grad is not None


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_save_load_is_exact_and_keeps_the_decoder_tied(family, tmp_path):
    model, _, result = _factorized(family, rank=6)
    record = model_record(model)
    record.methods["embeddings"] = embeddings_record(result, model)
    path = save_checkpoint(model, tmp_path / "f", record)
    loaded = load_model(path)
    batch = tiny_batch()
    assert torch.equal(loaded(**batch).logits, model(**batch).logits)
    embedding = loaded.get_input_embeddings()
    assert isinstance(embedding, FactorizedEmbedding) and embedding.rank == 6
    decoder = loaded.get_output_embeddings()
    if isinstance(decoder, FactorizedDecoder):
        assert decoder.embedding is embedding
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        # the factors are stored once; no dense V x H matrix anywhere (but an untied decoder's own)
        assert sum(k.endswith(".factor") for k in keys) == 1
        matrix = (result.vocab, result.width)
        dense = [k for k in keys if tuple(f.get_slice(k).get_shape()) in (matrix, matrix[::-1])]
    untied = not model.config.tie_word_embeddings
    assert len(dense) == (1 if untied else 0), dense


def test_padding_row_keeps_its_semantics():
    model, original, _ = _factorized("roberta", rank=6)  # padding id 1, a zero row
    embedding = model.get_input_embeddings()
    assert embedding.padding_idx == 1 and not original[1].any()
    assert not embedding.factor[1].any() and not embedding.weight[1].any()
    ids = torch.tensor([[0, 1, 5, 1]])
    embedding(ids).sum().backward()
    assert not embedding.factor.grad[1].any() and embedding.factor.grad[5].any()


def test_cli_summary_record_info_and_errors(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "m")
    code, _, err = run_cli(capsys, "factorize-embeddings", source, "-o", tmp_path / "f", "--rank", "8")
    assert code == 0, err
    assert "99 x 32 -> 99 x 8 + 8 x 32" in err and "2,120 saved" in err and "relative reconstruction error" in err
    record = json.loads((tmp_path / "f" / "config.json").read_text())["ghostify"]
    entry = record["methods"]["embeddings"]
    assert entry["rank"] == 8 and entry["params_saved"] == 99 * 32 - 8 * 131
    assert record["history"][-1]["command"] == "factorize-embeddings"
    code, out, _ = run_cli(capsys, "info", tmp_path / "f", "--json")
    info = json.loads(out)
    code, out, _ = run_cli(capsys, "info", source, "--json")
    dense = json.loads(out)
    assert info["params"] == dense["params"] - 2120 and info["embeddings"]["error"] == entry["error"]
    assert info["embedding_params"] == dense["embedding_params"] - 2120

    for args, message in (
        (["--rank", "0"], "--rank 0 must be a positive integer"),
        (["--rank", "33"], "--rank 33 exceeds the 99 x 32 embedding matrix's rank 32; choose at most 32"),
    ):
        code, _, err = run_cli(capsys, "factorize-embeddings", source, "-o", tmp_path / "bad", *args)
        assert code == 2 and err.count("\n") == 1 and message in err, err
        assert not (tmp_path / "bad").exists()
    code, _, err = run_cli(capsys, "factorize-embeddings", source, "-o", tmp_path / "full", "--rank", "32")
    assert code == 0 and "warning: rank 32 of the 99 x 32 embeddings saves nothing" in err


def test_composes_with_prune_attach_ghost_and_distill(tmp_path, capsys):
    from ghostify.testing import write_toy_dataset

    source = tiny_checkpoint(tmp_path / "m")
    data = write_toy_dataset(tmp_path / "toy", train=32, validation=16)

    def ok(*args):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        return out

    ok("factorize-embeddings", source, "-o", tmp_path / "f", "--rank", "8")
    ok("prune", tmp_path / "f", "-o", tmp_path / "p", "--width", "0.5")
    ok("attach-ghost", tmp_path / "p", "-o", tmp_path / "g")
    ok("distill", "--teacher", source, "--student", tmp_path / "g", "-o", tmp_path / "d", "--dataset", data,
       "--text-columns", "sentence", "--label-column", "label", "--max-length", "32", "--epochs", "1",
       "--batch-size", "16")
    info = json.loads(ok("info", tmp_path / "d", "--json"))
    assert info["embeddings"]["rank"] == 8 and info["ghost"] and info["heads_per_layer"] == [2, 2]
    distilled = load_model(tmp_path / "d")
    before = load_model(tmp_path / "g")
    assert not torch.equal(distilled.get_input_embeddings().factor, before.get_input_embeddings().factor)
