"""The real MiniLM, fine-tuned on SST-2, pruned and ghosted, exported and evaluated without ghostify's loader."""

from __future__ import annotations

import json

import pytest

from ghostify import steps
from tests.conftest import run_cli

pytestmark = [pytest.mark.real, pytest.mark.filterwarnings("ignore")]


def test_minilm_sst2_export_hf_onnx_int8_keeps_accuracy(sst2_teacher, glue, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    steps.prune(sst2_teacher, tmp_path / "pruned", width="6/12")
    steps.attach_ghost(tmp_path / "pruned", tmp_path / "ghost")
    hf = steps.export(tmp_path / "ghost", tmp_path / "hf")
    assert hf["max_difference"] <= 1e-5 and not hf["stock"]
    onnx = steps.export(tmp_path / "ghost", tmp_path / "onnx", format="onnx", quantize="int8")
    assert onnx["max_difference"] <= 1e-4
    scores = {}
    for name, model in (("ghostify", tmp_path / "ghost"), ("hf", tmp_path / "hf"), ("onnx", tmp_path / "onnx"),
                        ("int8", tmp_path / "onnx" / "model_int8.onnx")):
        code, out, err = run_cli(capsys, "eval", model, "--task", "sst2", "--dataset", glue, "--max-samples", "300", "--json")
        assert code == 0, err
        scores[name] = json.loads(out)["metrics"]["accuracy"]
    assert scores["hf"] == scores["ghostify"] == scores["onnx"], scores
    assert abs(scores["int8"] - scores["onnx"]) <= 0.03, scores
    assert scores["ghostify"] > 0.6, scores  # a working classifier, not chance
