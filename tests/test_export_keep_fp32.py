"""`export --quantize int8 --keep-fp32 MODULES`: the modules named stay fp32 MatMuls in model_int8.onnx (ONNX
Runtime's nodes_to_exclude), everything else is quantised as before; a pattern that names no module, or the flag
without int8, is refused in one line before anything is written."""

from __future__ import annotations

import pytest

from ghostify import steps
from ghostify.architectures import SUPPORTED_MODEL_TYPES
from ghostify.errors import GhostifyError
from ghostify.export.onnx import module_group, resolve_keep_fp32
from ghostify.testing import FFN, HIDDEN, LAYERS, tiny_checkpoint
from tests.conftest import run_cli

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _ops(path):
    graph = onnx.load(str(path)).graph
    weights = {i.name: i for i in graph.initializer}
    fp32 = [n for n in graph.node if n.op_type == "MatMul" and any(i in weights for i in n.input)]
    return [n.op_type for n in graph.node], {n.name: [onnx.numpy_helper.to_array(weights[i]).shape for i in n.input
                                                      if i in weights][0] for n in fp32}


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("qa") / "model", head="question-answering")


@pytest.fixture(scope="module")
def plain(qa_model, tmp_path_factory):
    """The QA model's int8 export without --keep-fp32 (the directory, and export's result), read by two tests."""
    out = tmp_path_factory.mktemp("plain") / "plain"
    return out, steps.export(qa_model, out, format="onnx", quantize="int8")


def test_the_named_head_stays_fp32_and_the_rest_is_quantised(tmp_path, qa_model, plain):
    plain_dir, plain = plain
    kept = steps.export(qa_model, tmp_path / "kept", format="onnx", quantize="int8", keep_fp32=("qa_outputs",))
    assert "kept_fp32" not in plain and len(kept["kept_fp32"]) >= 1
    ops_plain, fp32_plain = _ops(plain_dir / "model_int8.onnx")
    ops_kept, fp32_kept = _ops(tmp_path / "kept" / "model_int8.onnx")
    assert fp32_plain == {}  # every weight MatMul is int8 without the flag
    assert list(fp32_kept.values()) == [(HIDDEN, 2)]  # only the QA head's (hidden -> start/end) weight is fp32
    assert ops_kept.count("MatMulInteger") == ops_plain.count("MatMulInteger") - 1
    card = (tmp_path / "kept" / "README.md").read_text()
    assert "dynamic quantisation; fp32: `qa_outputs`" in card and "fp32: `" not in (plain_dir / "README.md").read_text()
    # the fp32 graph is the same either way
    assert (plain_dir / "model.onnx").read_bytes() == (tmp_path / "kept" / "model.onnx").read_bytes()


@pytest.mark.slow  # every day the CLI test below keeps the same patterns and checks the same MatMuls
def test_a_pattern_keeps_every_module_it_matches(tmp_path, qa_model):
    """``*.intermediate.dense`` matches each layer's FFN input projection: one fp32 MatMul per layer."""
    result = steps.export(qa_model, tmp_path / "onnx", format="onnx", quantize="int8",
                          keep_fp32=("*.intermediate.dense", "qa_outputs"))
    _, fp32 = _ops(tmp_path / "onnx" / "model_int8.onnx")
    assert sorted(fp32.values()) == sorted([(HIDDEN, FFN)] * LAYERS + [(HIDDEN, 2)]), fp32
    assert len(result["kept_fp32"]) >= LAYERS + 1


def test_keeping_nodes_fp32_brings_the_int8_graph_closer_to_pytorch(tmp_path, qa_model, plain):
    """Every module kept fp32 (embedding tables included): the int8 graph computes what PyTorch does."""
    _, plain = plain
    every = steps.export(qa_model, tmp_path / "every", format="onnx", quantize="int8", keep_fp32=("*",))
    assert every["int8_difference"] < 1e-4 < plain["int8_difference"]  # nothing quantised: the fp32 graph's outputs
    ops, _ = _ops(tmp_path / "every" / "model_int8.onnx")
    assert "MatMulInteger" not in ops and "DequantizeLinear" not in ops


def test_a_pattern_that_names_no_module_is_refused_before_writing(tmp_path, qa_model):
    with pytest.raises(GhostifyError, match=r"--keep-fp32 'qa_head' names no module of this .*ForQuestionAnswering") as err:
        steps.export(qa_model, tmp_path / "onnx", format="onnx", quantize="int8", keep_fp32=("qa_head",))
    assert "\n" not in str(err.value) and "qa_outputs" in str(err.value)  # an example of a real name
    assert not (tmp_path / "onnx").exists()


def test_keep_fp32_without_int8_is_refused(tmp_path, qa_model):
    with pytest.raises(GhostifyError, match="add --format onnx --quantize int8"):
        steps.export(qa_model, tmp_path / "onnx", format="onnx", keep_fp32=("qa_outputs",))


def test_the_cli_flag_and_the_recipe_key(tmp_path, qa_model, capsys):
    code, _, err = run_cli(capsys, "export", qa_model, "-o", tmp_path / "cli", "--format", "onnx", "--quantize", "int8",
                           "--keep-fp32", "qa_outputs, *.intermediate.dense")
    assert code == 0, err
    assert "graph nodes kept fp32" in err
    _, fp32 = _ops(tmp_path / "cli" / "model_int8.onnx")  # the pattern matched each layer's FFN input projection
    assert sorted(fp32.values()) == sorted([(HIDDEN, FFN)] * LAYERS + [(HIDDEN, 2)]), fp32
    code, _, err = run_cli(capsys, "export", qa_model, "-o", tmp_path / "bad", "--format", "onnx", "--quantize", "int8",
                           "--keep-fp32", "nothing")
    assert code != 0 and "Traceback" not in err and "names no module" in err
    from ghostify import recipe as recipes

    path = tmp_path / "r.yaml"
    path.write_text(f"model: {qa_model}\nstages:\n  - export: {{format: onnx, quantize: int8, keep_fp32: [qa_outputs]}}\n")
    recipes.run(recipes.load(path), tmp_path / "run")
    _, fp32 = _ops(next((tmp_path / "run").glob("01-*")) / "model_int8.onnx")
    assert list(fp32.values()) == [(HIDDEN, 2)]


@pytest.mark.slow  # every day: the named head kept fp32, and every family's groups resolved
def test_the_family_independent_groups_name_the_same_modules(tmp_path, qa_model):
    """``task-head`` and ``ffn-down`` resolve through the adapter: the same graph as the BERT module names."""
    by_group = steps.export(qa_model, tmp_path / "group", format="onnx", quantize="int8", keep_fp32=("task-head", "ffn-down"))
    by_name = steps.export(qa_model, tmp_path / "name", format="onnx", quantize="int8",
                           keep_fp32=("qa_outputs", "*.output.dense"))
    _, fp32 = _ops(tmp_path / "group" / "model_int8.onnx")
    # each layer's d_ff -> hidden projection and the head; not the attention output (also named *.output.dense)
    assert sorted(fp32.values()) == sorted([(FFN, HIDDEN)] * LAYERS + [(HIDDEN, 2)]), fp32
    assert set(by_group["kept_fp32"]) < set(by_name["kept_fp32"])
    assert "fp32: `task-head`, `ffn-down`" in (tmp_path / "group" / "README.md").read_text()


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_every_family_resolves_every_group(model_type):
    """Each group names modules of the right shape in every family: d_ff on the FFN side, none inside the encoder
    for the task head."""
    from ghostify.architectures import get_adapter
    from ghostify.testing import tiny_model

    model = tiny_model(model_type, "sequence-classification")
    adapter = get_adapter(model.config)
    ffn, layers = adapter.ffn_size(model.config), len(adapter.layers(model))
    for group in ("attention-output", "ffn-up", "ffn-down"):
        names = module_group(model, group)
        assert len(names) >= layers and all(model.get_submodule(n).weight.ndim == 2 for n in names), (group, names)
        dims = [model.get_submodule(n).weight.shape for n in names]
        if group != "attention-output":
            assert all(ffn in d or 2 * ffn in d for d in dims), (group, dims)
    heads = module_group(model, "task-head")
    assert heads != [] and module_group(tiny_model(model_type), "task-head") == []  # a base model has no head
    assert all(not n.startswith(model.base_model_prefix + ".") for n in heads)
    assert resolve_keep_fp32(model, ("ffn-down", "ffn-down")) == tuple(module_group(model, "ffn-down"))
