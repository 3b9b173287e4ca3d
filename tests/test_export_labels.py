"""Exports for downstream use: the dataset's class names in ``id2label``, transformers' pipeline
accepting the exported classes without a warning, and the sentence-transformers layout only for
an encoder without a task head."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from ghostify.export.hf import WITHOUT_GHOSTIFY
from ghostify.testing import tiny_checkpoint, tiny_sentence_transformer, write_toy_dataset

from .conftest import run_cli
from .test_data_files import _rows, write_rows

_PIPELINE = WITHOUT_GHOSTIFY + textwrap.dedent("""
    import json
    from transformers import pipeline  # not quieted: its warnings are part of what the test reads

    classify = pipeline("text-classification", model=sys.argv[1], trust_remote_code=True)
    predictions = classify(["a great film", "a dull plot"])
    print(json.dumps({"labels": [p["label"] for p in predictions], "class": type(classify.model).__module__}))
""")


def _pipeline(export: Path, tmp: Path) -> tuple[dict, str]:
    env = {"PATH": "/usr/bin:/bin", "HF_MODULES_CACHE": str(tmp / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", _PIPELINE, str(export)], capture_output=True, text=True, cwd=tmp,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_a_pipeline_takes_an_export_with_code_and_names_the_classes(tmp_path, capsys, without_load_check):
    """The export loads in a transformers pipeline in a fresh Python (this test's own check of it)."""
    model = tiny_checkpoint(tmp_path / "m", head="base")
    data = write_rows(tmp_path / "reviews.jsonl", _rows(40))
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", data,
                           "--text-columns", "sentence", "--label-column", "label", "--epochs", "1", "--batch-size", "8")
    assert code == 0, err
    code, _, err = run_cli(capsys, "prune", tmp_path / "ft", "-o", tmp_path / "pruned", "--width", "0.5")
    assert code == 0, err
    code, _, err = run_cli(capsys, "attach-ghost", tmp_path / "pruned", "-o", tmp_path / "ghost")
    assert code == 0, err
    code, _, err = run_cli(capsys, "export", tmp_path / "ghost", "-o", tmp_path / "hf")
    assert code == 0, err
    assert (tmp_path / "hf" / "modeling_ghostify.py").is_file()  # the remote-code path, not a stock checkpoint
    got, stderr = _pipeline(tmp_path / "hf", tmp_path)
    assert "is not supported" not in stderr, stderr[-2000:]
    assert set(got["labels"]) <= {"neg", "pos"} and got["class"].endswith("modeling_ghostify"), got


def test_class_label_names_become_the_heads_labels(tmp_path, capsys):
    import datasets

    toy = write_toy_dataset(tmp_path / "toy", train=32, validation=16)
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    splits = {split: datasets.load_dataset("csv", data_files=str(toy / f"{split}.csv"), split="train", features=features)
              for split in ("train", "validation")}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "named"))
    model = tiny_checkpoint(tmp_path / "m", head="base")
    code, _, err = run_cli(capsys, "finetune", model, "-o", tmp_path / "ft", "--dataset", tmp_path / "named",
                           "--text-columns", "sentence", "--epochs", "1", "--batch-size", "16")
    assert code == 0, err
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}


def test_a_classifier_from_an_embedding_model_exports_without_the_sentence_transformers_layout(tmp_path, capsys,
                                                                                            without_load_check):
    encoder = tiny_sentence_transformer(tmp_path / "st")
    toy = write_toy_dataset(tmp_path / "toy", train=32, validation=16)
    code, _, err = run_cli(capsys, "finetune", encoder, "-o", tmp_path / "ft", "--dataset", toy,
                           "--text-columns", "sentence", "--epochs", "1", "--batch-size", "16")
    assert code == 0, err
    code, _, err = run_cli(capsys, "export", tmp_path / "ft", "-o", tmp_path / "hf")
    assert code == 0, err
    assert not (tmp_path / "hf" / "modules.json").exists() and "sentence-transformers layout" not in err
    # the encoder itself still gets the layout
    code, _, err = run_cli(capsys, "export", encoder, "-o", tmp_path / "hf-encoder")
    assert code == 0, err
    assert (tmp_path / "hf-encoder" / "modules.json").is_file()
