"""OpenVINO (issue 47): `export --format openvino` writes the IR checked against PyTorch in fp32, `--quantize int8`
adds NNCF's post-training int8 graph calibrated on the task's training examples, and `eval`, `bench` and `latency`
run both. Skipped where the openvino extra is not installed (`pip install "ghostify[openvino]"`).

Tolerances stated here, on the tiny models' outputs (hidden states after a layer norm, of order 1; logits):
- fp32 arithmetic (`INFERENCE_PRECISION_HINT: f32`): 1e-4, as every export;
- bf16 arithmetic (OpenVINO's default where the CPU has it): 5% of the largest output value, bf16 keeping 8 bits
  of mantissa through two layers;
- int8 (NNCF, calibrated): 15% of the largest output value, on random weights that no training made robust to it
  (measured here: 5-9%).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from ghostify import load_model, steps
from ghostify.export.onnx import example_batch, input_names
from ghostify.export.runtime import GraphModel
from ghostify.runtimes import graph_of, target
from ghostify.testing import tiny_checkpoint, write_toy_dataset, write_toy_ner_dataset

from .conftest import every_day_params, run_cli

pytest.importorskip("openvino")
pytest.importorskip("nncf")

OPENVINO = target("openvino").runtime
BF16_TOLERANCE = 0.05  # of the largest output value
INT8_TOLERANCE = 0.15


def _data(tmp_path: Path) -> dict[str, object]:
    """The toy text-classification data, as export's calibration options."""
    data = write_toy_dataset(tmp_path / "data", train=64, validation=32)
    return {"dataset": str(data), "text_columns": ("sentence",), "label_column": "label"}


def _worst(net: torch.nn.Module, graph: GraphModel, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
    """The largest difference of ``graph`` from ``net`` over every output (a per-token one at the real tokens:
    what a model computes at padding is no output), and the largest output value."""
    with torch.no_grad():
        expected = net(**batch)
    got = graph(**batch)
    names = [n for n in ("logits", "last_hidden_state") if getattr(expected, n, None) is not None]
    mask = batch["attention_mask"].bool()
    pick = (lambda t: t[mask] if t.shape[:2] == mask.shape else t)
    worst = max(float(pick(getattr(got, n) - getattr(expected, n)).abs().max()) for n in names)
    return worst, max(float(pick(getattr(expected, n)).abs().max()) for n in names)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A bare BERT encoder exported once to the IR and its int8 graph (40 calibration examples), which the tests that
    read an export share (each reads it, or a copy): (the checkpoint, the export's directory, export's result)."""
    root = tmp_path_factory.mktemp("openvino-export")
    source = tiny_checkpoint(root / "model", "bert", head="base")
    result = steps.export(source, root / "ov", format="openvino", quantize="int8", calibration_samples=40,
                          **_data(root))
    return source, root / "ov", result


def _other_batch(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    batch = example_batch(net.config, input_names(net), 4, 17, seed=9)
    batch["attention_mask"][0, 3:] = 0  # a padding pattern the export's own check did not use
    return batch


# the encoder families of every pattern: absolute positions (BERT), RoPE with a fused QKV and a gated FFN
# (ModernBERT), RoPE with grouped-query attention and a gated FFN (EuroBERT), relative positions (DeBERTa-v2); every
# day BERT (ModernBERT's graph is checked every day in ONNX Runtime), the others in the full run
@pytest.mark.parametrize("family", every_day_params(["bert", "modernbert", "eurobert", "deberta-v2"], ["bert"]))
def test_export_matches_pytorch_in_fp32(tmp_path, family):
    source = tiny_checkpoint(tmp_path / "model", family, head="base")
    result = steps.export(source, tmp_path / "ov", format="openvino")
    assert result["max_difference"] <= 1e-4 and result["runtime"] == "openvino"
    assert result["files"] == ["model.xml", "model.bin"]
    assert sorted(p.name for p in (tmp_path / "ov").iterdir() if p.suffix in (".xml", ".bin", ".onnx")) == \
        ["model.bin", "model.xml"]  # the ONNX graph it was converted from is not left behind
    net = load_model(source).eval()
    worst, _ = _worst(net, GraphModel(tmp_path / "ov" / "model.xml", precision="f32"), _other_batch(net))
    assert worst <= 1e-4


def test_default_precision_is_bf16_where_the_cpu_has_it(exported):
    reduced = OPENVINO.reduced_precision()
    if reduced is None:
        pytest.skip("this CPU has no bf16: OpenVINO computes fp32 by default (the fp32 test covers it)")
    source, ov, result = exported
    assert result["precision"]["name"] == reduced
    net = load_model(source).eval()
    default = GraphModel(ov / "model.xml")
    assert default.session.precision == reduced
    worst, scale = _worst(net, default, _other_batch(net))
    assert 0 < worst <= BF16_TOLERANCE * scale  # bf16 differs from fp32, within its tolerance


def test_int8_graph_is_quantised_calibrated_and_close(exported):
    import openvino

    source, ov, result = exported
    assert result["files"] == ["model.xml", "model.bin", "model_int8.xml", "model_int8.bin"]
    assert result["calibration_samples"] == 40
    ops = openvino.Core().read_model(str(ov / "model_int8.xml")).get_ordered_ops()
    assert sum(op.get_type_name() == "FakeQuantize" for op in ops) >= 2 * 6  # every layer's projections
    assert (ov / "model_int8.bin").stat().st_size < 0.5 * (ov / "model.bin").stat().st_size
    net = load_model(source).eval()
    worst, scale = _worst(net, GraphModel(ov / "model_int8.xml"), _other_batch(net))
    assert 0 < worst <= INT8_TOLERANCE * scale
    assert result["int8_difference"] <= INT8_TOLERANCE * scale


@pytest.mark.slow  # two more NNCF calibrations (~25 s): the full run's; every day the int8 graph is checked above
def test_the_calibration_examples_set_the_int8_bytes(exported, tmp_path):
    """The calibration is what sets the ranges: other examples give other bytes, the same ones the same bytes."""
    source, ov, _ = exported
    data = _data(tmp_path)  # the same toy data as the shared export's (written from a fixed seed)
    steps.export(source, tmp_path / "again", format="openvino", quantize="int8", calibration_samples=40, **data)
    steps.export(source, tmp_path / "fewer", format="openvino", quantize="int8", calibration_samples=3, **data)
    weights = {name: (where / "model_int8.bin").read_bytes()
               for name, where in (("ov", ov), ("again", tmp_path / "again"), ("fewer", tmp_path / "fewer"))}
    assert weights["ov"] == weights["again"] and weights["ov"] != weights["fewer"]


@pytest.mark.slow  # the full run (keep-fp32's groups daily in test_export_keep_fp32 (ONNX Runtime))
def test_keep_fp32_leaves_the_task_head_out_of_int8(tmp_path):
    import openvino

    source = tiny_checkpoint(tmp_path / "model", "bert")
    data = _data(tmp_path)
    counts = {}
    for name, keep in (("all", None), ("head", ("task-head",))):
        result = steps.export(source, tmp_path / name, format="openvino", quantize="int8", keep_fp32=keep,
                              calibration_samples=8, **data)
        model = openvino.Core().read_model(str(tmp_path / name / "model_int8.xml"))
        counts[name] = sum(op.get_type_name() == "FakeQuantize" for op in model.get_ordered_ops())
    assert result["kept_fp32"] and counts["head"] == counts["all"] - 1  # the classifier's input stays float


def test_calibration_needs_a_task(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "model", "bert")
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "ov", "--format", "openvino", "--quantize", "int8")
    assert code != 0 and err.count("\n") == 1 and "--task" in err and "calibrates" in err
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "ov", "--format", "openvino", "--quantize", "int8",
                           "--task", "sst2", "--calibration-samples", "0")
    assert code != 0 and err.count("\n") == 1 and "--calibration-samples" in err
    assert not (tmp_path / "ov").exists()


def test_eval_and_bench_run_the_ir(tmp_path, capsys):
    source = tiny_checkpoint(tmp_path / "model", "bert")
    data = _data(tmp_path)
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "ov", "--format", "openvino", "--quantize", "int8",
                           "--dataset", data["dataset"], "--text-columns", "sentence", "--label-column", "label",
                           "--calibration-samples", "16")
    assert code == 0, err
    assert "openvino" in (tmp_path / "ov" / "README.md").read_text()  # the card's tags and usage
    scores = {}
    for model in (source, tmp_path / "ov", tmp_path / "ov" / "model_int8.xml"):
        code, out, err = run_cli(capsys, "eval", model, "--dataset", data["dataset"], "--text-columns", "sentence",
                                 "--label-column", "label", "--json")
        assert code == 0, err
        scores[str(model)] = json.loads(out)["metrics"]["accuracy"]
    if OPENVINO.reduced_precision() is None:  # fp32 arithmetic: the same predictions
        assert scores[str(source)] == scores[str(tmp_path / "ov")]
    code, out, err = run_cli(capsys, "bench", source, tmp_path / "ov", tmp_path / "ov" / "model_int8.xml", "--rounds", "3",
                             "--warmup", "1", "--seq-len", "16", "--json")
    assert code == 0, err
    assert [r["runtime"] for r in json.loads(out)] == ["pytorch", "openvino", "openvino (int8)"]
    code, _, err = run_cli(capsys, "info", tmp_path / "ov")
    assert code != 0 and err.count("\n") == 1 and "is an OpenVINO export (model.xml, model_int8.xml)" in err
    code, _, err = run_cli(capsys, "eval", tmp_path / "ov" / "missing.xml", "--task", "sst2")
    assert code != 0 and err.count("\n") == 1 and "missing.xml" in err


def test_a_damaged_ir_is_one_line(exported, tmp_path, capsys):
    shutil.copytree(exported[1], tmp_path / "ov")  # a copy: the shared export stays whole
    (tmp_path / "ov" / "model.xml").write_text("<net>not a graph")
    code, _, err = run_cli(capsys, "bench", tmp_path / "ov", "--rounds", "1", "--seq-len", "8")
    assert code != 0 and err.count("\n") == 1 and "cannot be loaded" in err and "--format openvino" in err


def test_latency_probes_run_in_the_int8_graph(tmp_path):
    # a probe of the latency model in openvino-int8 is the int8 IR (quantised on random ids: timing, not accuracy)
    from ghostify.checkpoint import load_config
    from ghostify.steps.latency import Shape, _exported, build

    config = load_config(tiny_checkpoint(tmp_path / "model", "bert"))
    net, record = build(config, Shape("probe", (2,), (9,)), seed=0)
    (tmp_path / "probe").mkdir()
    graph = _exported(net, record, target("openvino-int8"), tmp_path / "probe", calibration_length=16)
    assert graph.name == "model_int8.xml" and graph_of(graph)[0].name == "openvino-int8"
    with torch.no_grad():
        batch = example_batch(net.config, input_names(net), 1, 16, seed=0, padded=False)
        assert GraphModel(graph)(**batch).logits.shape == net(**batch).logits.shape


@pytest.mark.slow  # two OpenVINO int8 exports (~20 s): the full run's; every day the calibration test above runs
def test_calibration_reads_a_dataset_whose_columns_are_named_as_for_training(tmp_path, capsys):
    """A token classifier's own data with its words in `words` and its tags in `labels`: export calibrates on it
    given the columns (as finetune and eval are), and so does a graph compress only times."""
    import datasets

    from ghostify.settings import DataSettings, TaskSettings
    from ghostify.steps.timed_graphs import timed_graph

    source = tiny_checkpoint(tmp_path / "model", head="token-classification", num_labels=5)
    toy = datasets.load_from_disk(str(write_toy_ner_dataset(tmp_path / "toy", train=24, validation=8)))
    toy.rename_columns({"tokens": "words", "ner_tags": "labels"}).save_to_disk(str(tmp_path / "ner"))
    base = ["export", source, "--format", "openvino", "--quantize", "int8", "--dataset", tmp_path / "ner",
            "--calibration-samples", "12"]
    code, _, err = run_cli(capsys, *base, "-o", tmp_path / "preset", "--task", "conll2003")
    assert code != 0 and err.count("\n") == 1 and "tokens" in err  # the preset's column is not there
    assert not (tmp_path / "preset").exists()
    code, out, err = run_cli(capsys, *base, "-o", tmp_path / "ov", "--tokens-column", "words", "--tags-column",
                             "labels", "--json")
    assert code == 0, err
    assert json.loads(out)["calibration_samples"] == 12 and (tmp_path / "ov" / "model_int8.xml").is_file()
    timed = timed_graph(source, tmp_path / "timed", target("openvino-int8"), seq_len=16,
                        data=DataSettings(dataset=str(tmp_path / "ner")),
                        task_settings=TaskSettings(tokens_column="words", tags_column="labels"))
    assert Path(timed).name == "model_int8.xml"
