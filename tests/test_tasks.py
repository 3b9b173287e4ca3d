"""Token classification, extractive QA and sentence embeddings through the whole chain (issue 14):
every command on a tiny model of every family for each task, resume, and the embedding pooling
against sentence-transformers on the real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ghostify import load_model, steps
from ghostify.architectures import get_adapter
from ghostify.errors import GhostifyError
from ghostify.tasks.embeddings import retrieval
from ghostify.testing import (
    ships_head,
    tiny_checkpoint,
    tiny_sentence_transformer,
    write_toy_ner_dataset,
    write_toy_pairs,
    write_toy_sentences,
    write_toy_squad_dataset,
)

from .conftest import ALL_FAMILIES, CHAIN_FAMILIES, family_params, run_cli

NER = {"tokens_column": "tokens", "tags_column": "ner_tags", "max_length": 32}
QA = {"question_column": "question", "max_length": 32, "doc_stride": 8}
SHORT = {"epochs": 1, "batch_size": 8, "learning_rate": 3e-3}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("task-data")
    write_toy_ner_dataset(root / "ner", train=24, validation=8)
    write_toy_squad_dataset(root / "squad", train=12, validation=6)
    write_toy_sentences(root / "sentences.txt", count=24)
    write_toy_pairs(root / "pairs", train=8, validation=16)
    return root


def _chain(family: str, root: Path, tmp: Path, **task) -> dict:
    """finetune -> eval -> importance -> prune -> distill (per-token / start-end logits) -> eval."""
    tiny_checkpoint(tmp / "m", family, head="base")
    steps.finetune(tmp / "m", tmp / "teacher", **task, **SHORT)
    before = steps.evaluate(tmp / "teacher", **task)
    scores = steps.importance(tmp / "teacher", tmp / "scored", **task, samples=8)
    assert all(t.sum() > 0 for t in scores.heads + scores.ffn)
    steps.prune(tmp / "scored", tmp / "pruned", width="2/4")
    scores_too = get_adapter(load_model(tmp / "pruned").config).uses_attention_interface  # not DeBERTa, MPNet
    steps.distill(tmp / "teacher", tmp / "pruned", tmp / "student", **task, **SHORT, logit_weight=1.0,
                  attention_weight=1.0 if scores_too else 0.0)
    after = steps.evaluate(tmp / "student", **task)
    return {"before": before, "after": after}


@pytest.mark.parametrize("family", family_params(ALL_FAMILIES, CHAIN_FAMILIES))
def test_token_classification_chain(family, data, tmp_path):
    result = _chain(family, data, tmp_path, dataset=str(data / "ner"), **NER)
    for stage in result.values():
        assert set(stage["metrics"]) == {"precision", "recall", "f1", "accuracy"} and stage["samples"] == 8
        assert 0 <= stage["metrics"]["f1"] <= 1 and 0 < stage["metrics"]["accuracy"] <= 1
    assert load_model(tmp_path / "student").config.id2label[1] == "B-THING"  # the tag names travel


def test_the_qa_metric_compress_compares_candidates_by_says_it_is_in_percent(data, tmp_path):
    """compress judges candidate allocations by the task's metric with its standard error: SQuAD's F1 is in percent."""
    from ghostify.methods.pruning import ImportanceScores
    from ghostify.steps.fidelity import task_metric

    tiny_checkpoint(tmp_path / "m", "bert", head="question-answering")
    steps.importance(tmp_path / "m", tmp_path / "scored", dataset=str(data / "squad"), **QA, samples=8)
    description = ImportanceScores.load(tmp_path / "scored").metadata["data"]
    scored = task_metric([tmp_path / "scored"], description, samples=8, seed=1)
    assert scored.name == "f1" and scored.full_score == 100 and 0 <= scored.values[0] <= 100 and scored.count == 8


@pytest.mark.parametrize("family", family_params(ALL_FAMILIES, CHAIN_FAMILIES))
def test_question_answering_chain(family, data, tmp_path, capsys):
    task = dict(dataset=str(data / "squad"), **QA)
    if not ships_head(family, "question-answering"):  # EuroBERT, GTE, NomicBERT
        tiny_checkpoint(tmp_path / "m", family, head="base")
        code, _, err = run_cli(capsys, "finetune", tmp_path / "m", "-o", tmp_path / "t", "--dataset", data / "squad",
                               "--question-column", "question", "--max-length", "32", "--doc-stride", "8")
        assert code != 0 and len(err.strip().splitlines()) == 1 and "no question-answering head" in err, err
        return
    result = _chain(family, data, tmp_path, **task)
    for stage in result.values():
        metrics = stage["metrics"]
        assert {"exact_match", "f1", "HasAns_f1", "NoAns_f1"} <= set(metrics) and stage["samples"] == 6
        assert 0 <= metrics["exact_match"] <= metrics["f1"] <= 100


@pytest.mark.parametrize("family", family_params(ALL_FAMILIES, CHAIN_FAMILIES))
def test_embeddings_chain(family, data, tmp_path):
    tiny_sentence_transformer(tmp_path / "st", family)
    sentences = dict(task="embeddings", dataset=str(data / "sentences.txt"), text_columns=("text",), max_length=32)
    pairs = dict(task="embeddings", dataset=str(data / "pairs"), text_columns=("sentence1", "sentence2"))
    before = steps.evaluate(tmp_path / "st", **pairs)
    scores = steps.importance(tmp_path / "st", tmp_path / "scored", **sentences, samples=8)
    assert scores.metadata["label_free"] and all(t.sum() > 0 for t in scores.heads + scores.ffn)
    steps.prune(tmp_path / "scored", tmp_path / "pruned", width="2/4")
    steps.attach_ghost(tmp_path / "pruned", tmp_path / "ghost")
    steps.distill(tmp_path / "st", tmp_path / "ghost", tmp_path / "student", **sentences, **SHORT, logit_weight=1.0,
                  embedding_loss="cosine+mse")
    after = steps.evaluate(tmp_path / "student", **pairs)
    for result in (before, after):
        assert set(result["metrics"]) == {"spearman", "pearson", "recall@10", "mrr@10"} and result["samples"] == 16
        assert -1 <= result["metrics"]["spearman"] <= 1 and 0 <= result["metrics"]["mrr@10"] <= 1
    if family == "bert":  # the export finds the layout through the distilled student's history
        steps.export(tmp_path / "student", tmp_path / "hf", format="hf")
        assert (tmp_path / "hf" / "modules.json").is_file() and (tmp_path / "hf" / "1_Pooling" / "config.json").is_file()


# ----- resume ----------------------------------------------------------------------------------------------
class _Crash(Exception):
    pass


def _resumed_equals_whole(run, tmp_path: Path) -> None:
    run(tmp_path / "whole")

    def crash(step: int) -> None:
        if step == 3:
            raise _Crash

    with pytest.raises(_Crash):
        run(tmp_path / "resumed", on_step=crash)
    run(tmp_path / "resumed", resume=True)
    whole, resumed = load_model(tmp_path / "whole").state_dict(), load_model(tmp_path / "resumed").state_dict()
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)


@pytest.mark.parametrize("kind", ["tokens", "qa"])
def test_a_resumed_finetune_equals_an_uninterrupted_one(kind, data, tmp_path):
    tiny_checkpoint(tmp_path / "m", head="base")
    task = dict(dataset=str(data / "ner"), **NER) if kind == "tokens" else dict(dataset=str(data / "squad"), **QA)
    _resumed_equals_whole(lambda out, **kw: steps.finetune(tmp_path / "m", out, **task, epochs=2, batch_size=4,
                                                          checkpoint_steps=1, seed=3, **kw), tmp_path)


def test_a_resumed_embedding_distillation_equals_an_uninterrupted_one(data, tmp_path):
    tiny_sentence_transformer(tmp_path / "st")
    steps.prune(tmp_path / "st", tmp_path / "pruned", width="2/4")
    task = dict(task="embeddings", dataset=str(data / "sentences.txt"), text_columns=("text",), max_length=32)
    _resumed_equals_whole(lambda out, **kw: steps.distill(tmp_path / "st", tmp_path / "pruned", out, **task, epochs=2,
                                                         batch_size=8, checkpoint_steps=1, logit_weight=1.0, seed=3,
                                                         **kw), tmp_path)


# ----- metrics and refusals ----------------------------------------------------------------------------------
def test_retrieval_by_hand():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    corpus = torch.tensor([[1.0, 0.1], [0.1, 1.0], [-1.0, 0.0]])
    # query 0 -> doc 0 ranks 1st; query 1 -> doc 1 ranks 1st; query 2 -> doc 2 ranks 3rd
    got = retrieval(queries, corpus, torch.tensor([0, 1, 2]), k=2)
    assert got["recall@2"] == pytest.approx(2 / 3) and got["mrr@2"] == pytest.approx(2 / 3)
    got = retrieval(queries, corpus, torch.tensor([0, 1, 2]), k=3)
    assert got["recall@3"] == 1.0 and got["mrr@3"] == pytest.approx((1 + 1 + 1 / 3) / 3)


def test_string_tags_and_label_all_subwords(tmp_path):
    """A JSON-lines dataset with tag strings; every sub-word labelled (B- continues as I-)."""
    rows = [{"words": ["the", "films", "were", "great"], "tags": ["O", "B-THING", "O", "O"]},
            {"words": ["a", "city", "road"], "tags": ["O", "B-PLACE", "I-PLACE"]}] * 8
    for split in ("train", "validation"):
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tiny_checkpoint(tmp_path / "m", head="base")
    result = steps.finetune(tmp_path / "m", tmp_path / "t", dataset=str(tmp_path / "data"), tokens_column="words",
                            tags_column="tags", label_all_subwords=True, max_length=16, **SHORT)
    assert result.metrics and "f1" in result.metrics[-1]["eval"]
    assert load_model(tmp_path / "t").config.id2label == {0: "O", 1: "B-PLACE", 2: "B-THING", 3: "I-PLACE"}


@pytest.mark.parametrize("command", [["augment", "--mlm", "MLM", "-o", "OUT", "--task", "conll2003"],
                                     ["finetune", "ST", "-o", "OUT", "--task", "embeddings", "--text-columns", "text"]])
def test_what_a_task_cannot_do_is_one_line(command, data, tmp_path, capsys):
    tiny_sentence_transformer(tmp_path / "st")
    tiny_checkpoint(tmp_path / "mlm", head="masked-lm")
    args = [str({"MLM": tmp_path / "mlm", "ST": tmp_path / "st", "OUT": tmp_path / "out"}.get(a, a)) for a in command]
    code, _, err = run_cli(capsys, *args, "--dataset", str(data / "sentences.txt"))
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert ("entities are words" in err) or ("no labels to fine-tune on" in err)
    assert not (tmp_path / "out").exists()


def test_a_model_without_sentence_transformers_pooling_is_refused(data, tmp_path):
    tiny_checkpoint(tmp_path / "plain", head="base")
    with pytest.raises(GhostifyError, match="not a sentence-transformers model"):
        steps.evaluate(tmp_path / "plain", task="embeddings", dataset=str(data / "pairs"),
                       text_columns=("sentence1", "sentence2"))


# ----- the real model ------------------------------------------------------------------------------------------
@pytest.mark.real
def test_pooled_embeddings_equal_sentence_transformers_on_minilm(minilm, tmp_path):
    """ghostify's pooling (modules.json: mean, normalised) against SentenceTransformer.encode."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    from ghostify.tasks.embeddings import pooling_of

    texts = ["A man is playing a guitar.", "The weather is lovely today, isn't it?", "Short.",
             "Ghost modules generate more features from cheap operations."]
    expected = SentenceTransformer(str(minilm), device="cpu").encode(texts, convert_to_tensor=True)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm))
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    model = load_model(minilm, head="base")
    with torch.no_grad():
        got = pooling_of(minilm)(model(**batch).last_hidden_state, batch["attention_mask"])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(texts)))
