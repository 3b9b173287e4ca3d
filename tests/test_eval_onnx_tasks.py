"""`ghostify eval` on an ONNX export of a token classifier, an extractive-QA model or a sentence-embedding model: the
same metrics as the checkpoint it was exported from (fp32), and one line for a graph whose head is not the task's."""

from __future__ import annotations

import pytest

from ghostify import steps
from ghostify.errors import GhostifyError
from ghostify.testing import (
    tiny_checkpoint,
    tiny_sentence_transformer,
    write_toy_ner_dataset,
    write_toy_pairs,
    write_toy_squad_dataset,
)

from .test_messages import extra, world  # noqa: F401  (the toy classifier's ONNX export, built once)

pytest.importorskip("onnxruntime")

TASKS = {
    "tokens": ("token-classification", {"num_labels": 5}, write_toy_ner_dataset,
               {"tokens_column": "tokens", "tags_column": "ner_tags", "tag_scheme": "IOB2"}, "f1"),
    "qa": ("question-answering", {}, write_toy_squad_dataset, {"question_column": "question", "doc_stride": 8},
           "exact_match"),
}


@pytest.mark.parametrize("kind", TASKS)
def test_onnx_export_evaluates_like_its_checkpoint(tmp_path, kind):
    head, options, write, settings, metric = TASKS[kind]
    model = tiny_checkpoint(tmp_path / "model", head=head, **options)
    data = write(tmp_path / "data", train=8, validation=16)
    steps.export(model, tmp_path / "onnx", format="onnx", quantize="int8")
    scores = {}
    for name, path in {"pytorch": model, "onnx": tmp_path / "onnx" / "model.onnx",
                       "int8": tmp_path / "onnx" / "model_int8.onnx"}.items():
        scores[name] = steps.evaluate(path, dataset=str(data), max_length=32, **settings)["metrics"]
    assert metric in scores["pytorch"] and scores["int8"].keys() == scores["pytorch"].keys()
    assert scores["onnx"] == pytest.approx(scores["pytorch"], abs=1e-6)  # fp32: the same predictions


def test_onnx_export_of_a_sentence_embedding_model_evaluates_like_its_checkpoint(tmp_path):
    """What compress --task embeddings ships (an int8 graph) is scored as the checkpoint is: its token states pooled
    as the sentence-transformers model pools them (it stopped compress's last stage with a refusal)."""
    model = tiny_sentence_transformer(tmp_path / "st")
    pairs = write_toy_pairs(tmp_path / "pairs", train=8, validation=24)
    steps.export(model, tmp_path / "onnx", format="onnx", quantize="int8")
    settings = {"dataset": str(pairs), "task": "embeddings", "text_columns": ["sentence1", "sentence2"],
                "label_column": "label", "max_length": 32}
    scores = {name: steps.evaluate(path, **settings)["metrics"] for name, path in
              {"pytorch": model, "onnx": tmp_path / "onnx" / "model.onnx",
               "int8": tmp_path / "onnx" / "model_int8.onnx"}.items()}
    assert "spearman" in scores["pytorch"] and scores["int8"].keys() == scores["pytorch"].keys()
    assert scores["onnx"] == pytest.approx(scores["pytorch"], abs=1e-4)  # fp32: the same cosines, up to rounding


def test_onnx_export_of_another_head_is_refused(extra, tmp_path):  # noqa: F811
    data = write_toy_ner_dataset(tmp_path / "data", train=8, validation=8)
    with pytest.raises(GhostifyError, match="without a token-classification head"):  # a sentence classifier's export
        steps.evaluate(extra / "onnx", dataset=str(data), max_length=32, tokens_column="tokens",
                       tags_column="ner_tags")


def test_tag_names_come_from_a_trained_head_when_the_rows_lack_a_tag(tmp_path):
    """The validation rows (or a training sample) may lack one of the head's tags: the head's names still apply,
    in the head's order, where names read from the rows would be fewer (refused) or shifted."""
    import datasets

    names = ["O", "B-PLACE", "I-PLACE", "B-THING", "I-THING"]  # not sorted: the rows' sorted set would differ
    model = tiny_checkpoint(tmp_path / "model", head="token-classification", num_labels=5,
                            id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    rows = {"tokens": [["the", "film", "in", "city"], ["a", "song"]], "tags": [["O", "B-THING", "O", "B-PLACE"],
                                                                               ["O", "B-THING"]]}  # no I- tag
    datasets.DatasetDict({split: datasets.Dataset.from_dict(rows) for split in ("train", "validation")}).save_to_disk(
        str(tmp_path / "data"))
    result = steps.evaluate(model, dataset=str(tmp_path / "data"), max_length=32, tokens_column="tokens",
                            tags_column="tags", tag_scheme="IOB2")
    assert result["samples"] == 2 and 0 <= result["metrics"]["f1"] <= 1
