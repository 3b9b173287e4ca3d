"""`ghostify export`: compressed models that run without ghostify (transformers, ONNX Runtime)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ghostify import steps
from ghostify.architectures import get_adapter
from ghostify.checkpoint import load_config, load_model, model_record, save_checkpoint
from ghostify.errors import GhostifyError
from ghostify.export.hf import QUIET_TRANSFORMERS, WITHOUT_GHOSTIFY, write_hf
from ghostify.export.onnx import example_batch, input_names
from ghostify.testing import FAMILIES, tiny_checkpoint
from tests.conftest import EVERYDAY_FAMILIES, family_params, run_cli

pytestmark = pytest.mark.filterwarnings("ignore")


def _positions(model: Path) -> str:
    """Every ghost position the family's attention supports that --per-head applies to (ffn1: the conv variant)."""
    adapter = get_adapter(load_config(model))
    return "qk,v,o,ffn2" if adapter.uses_attention_interface else "o,ffn2"


def _chain(tmp: Path, family: str, variant: str) -> Path:
    """A tiny checkpoint of ``family`` through the structural methods of ``variant``."""
    model = tiny_checkpoint(tmp / "dense", family)
    if variant == "stock":  # only the FFN width changes, the same in every layer
        steps.prune(model, tmp / "out", heads_width=1.0, ffn_width=0.5)
        return tmp / "out"
    steps.prune(model, tmp / "pruned", heads_width=0.5, ffn_width=0.5, allocation="global")  # uneven per layer
    if variant == "ghosts":
        steps.attach_ghost(tmp / "pruned", tmp / "out", positions=_positions(tmp / "pruned"), features=2, per_head=True)
    elif variant == "conv":
        steps.attach_ghost(tmp / "pruned", tmp / "out", positions="o,ffn1,ffn2", conv="conv1d-seq", kernel_size=5,
                           init="center")
    elif variant == "zero-scale":  # output scales (zero at first) set to random values, as after training
        steps.attach_ghost(tmp / "pruned", tmp / "ghost", positions=_positions(tmp / "pruned"), init="zero-scale")
        net = load_model(tmp / "ghost")
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, param in net.named_parameters():
                if name.endswith(".scale"):
                    param.copy_(torch.randn(param.shape, generator=generator))
        save_checkpoint(net, tmp / "out", model_record(net), tokenizer_source=tmp / "ghost")
    elif variant == "grouped":
        steps.group_linear(tmp / "pruned", tmp / "grouped", groups=2, modules="qkv,o")
        steps.attach_ghost(tmp / "grouped", tmp / "out")
    elif variant == "embeddings":
        steps.factorize_embeddings(tmp / "pruned", tmp / "out", rank=8)
    elif variant == "shared":
        steps.share_layers(model, tmp / "shared", groups=1)
        steps.prune(tmp / "shared", tmp / "shared-pruned", width=0.5)
        steps.attach_ghost(tmp / "shared-pruned", tmp / "out")
    return tmp / "out"


_LOAD_ALL = WITHOUT_GHOSTIFY + QUIET_TRANSFORMERS + textwrap.dedent("""
    import json, tempfile
    import torch
    results = {}
    for case in json.loads(sys.argv[1]):
        auto = getattr(transformers, case["auto"])
        data = torch.load(case["io"])
        model = auto.from_pretrained(case["dir"], trust_remote_code=True).eval()
        with tempfile.TemporaryDirectory() as again:
            model.save_pretrained(again)
            reloaded = auto.from_pretrained(again, trust_remote_code=True).eval()
            with torch.no_grad():
                worst = max(float((m(**b).logits - e).abs().max()) for m in (model, reloaded)
                            for b, e in zip(data["batches"], data["logits"]))
        results[case["dir"]] = {"worst": worst, "class": f"{type(model).__module__}.{type(model).__name__}"}
    print(json.dumps(results))
""")

HF_CASES = [(f, "ghosts") for f in FAMILIES] + [("bert", v) for v in ("conv", "zero-scale", "grouped", "embeddings", "shared")] + [
    ("albert", "shared"), ("deberta-v2", "grouped"), ("electra", "embeddings")]


#: the everyday run exports one family of each kind of attention code (every method on BERT), the full run the rest
HF_GROUPS = [pytest.param([c for c in HF_CASES if c[0] in EVERYDAY_FAMILIES], id="everyday"),
             pytest.param([c for c in HF_CASES if c[0] not in EVERYDAY_FAMILIES], id="other-families", marks=pytest.mark.slow)]


@pytest.mark.parametrize("hf_cases", HF_GROUPS)
def test_hf_export_loads_without_ghostify_for_every_family_and_method(hf_cases, tmp_path):
    cases = []
    for family, variant in hf_cases:
        work = tmp_path / f"{family}-{variant}"
        source = _chain(work, family, variant)
        net = load_model(source)
        out = work / "export"
        out.mkdir()
        written = write_hf(net, out, source=source)
        assert not written.stock and written.auto_class == "AutoModelForSequenceClassification"
        _assert_only_needed_code(written.code_files, net)
        inputs = input_names(net)
        batches = [example_batch(net.config, inputs, 3, 11, seed=1), example_batch(net.config, inputs, 2, 6, seed=2, padded=False)]
        with torch.no_grad():
            logits = [net(**b).logits for b in batches]
        torch.save({"batches": batches, "logits": logits}, work / "io.pt")
        cases.append({"dir": str(out), "auto": written.auto_class, "io": str(work / "io.pt")})
    env = {"PATH": "/usr/bin:/bin", "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", _LOAD_ALL, json.dumps(cases)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    for (family, variant), case in zip(hf_cases, cases):
        got = loaded[case["dir"]]
        assert got["worst"] <= 1e-5, (family, variant, got)
        assert ".modeling_ghostify." in got["class"], got  # the export's own class (named like the stock one)


def _assert_only_needed_code(files: list[str], net) -> None:
    """The structure code of the methods the record has (and pruning's), and of the model's family's adapters."""
    from ghostify.architectures import _ADAPTERS
    from ghostify.export.code import flat_name
    from ghostify.methods import methods

    record = model_record(net)
    own = flat_name(type(get_adapter(net.config)).__module__) + ".py"
    families = {flat_name(cls.__module__) + ".py" for cls in _ADAPTERS}
    assert own in files and not (families - {own}) & set(files), (own, sorted(files))
    for method in methods():
        needed = not method.tracked or method.present(record)
        shipped = any(f.startswith(f"ghostify_methods_{method.name}_restore") for f in files)
        assert shipped == needed, (method.name, sorted(files))


def test_an_hf_export_of_a_pruned_bert_ships_only_the_code_its_record_needs(tmp_path):
    """Issue 39: it shipped 40 ghostify_*.py files (ModernBERT, DeBERTa, references, ...)."""
    model = tiny_checkpoint(tmp_path / "dense", "bert")
    steps.prune(model, tmp_path / "pruned", heads_width=0.5, ffn_width=0.5, allocation="global")
    steps.export(tmp_path / "pruned", tmp_path / "hf")  # checked: it loads without ghostify
    files = sorted(p.name for p in (tmp_path / "hf").glob("*.py"))
    _assert_only_needed_code(files, load_model(tmp_path / "pruned"))
    assert len([f for f in files if f.startswith("ghostify_")]) <= 12, files


def test_export_command_checks_hf_and_a_uniform_ffn_width_is_a_stock_checkpoint(tmp_path, capsys):
    ghosted = _chain(tmp_path / "g", "bert", "ghosts")
    code, out, err = run_cli(capsys, "export", ghosted, "-o", tmp_path / "hf", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["max_difference"] <= 1e-5 and not result["stock"]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSequenceClassification"] == "modeling_ghostify.BertForSequenceClassification"
    assert (tmp_path / "hf" / "tokenizer.json").is_file()

    stock = _chain(tmp_path / "s", "bert", "stock")
    code, out, err = run_cli(capsys, "export", stock, "-o", tmp_path / "stock")
    assert code == 0, err
    assert "stock checkpoint" in err
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert "auto_map" not in config and "ghostify" not in config and config["intermediate_size"] == 19
    assert not list((tmp_path / "stock").glob("*.py"))
    from transformers import AutoModelForSequenceClassification

    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "stock").eval()
    net = load_model(stock)
    batch = example_batch(net.config, input_names(net), 3, 9, seed=4)
    with torch.no_grad():
        assert torch.allclose(plain(**batch).logits, net(**batch).logits, atol=1e-6)


#: every family with ghosts (the full run's; every day BERT's ghosts graph is checked on these shapes by the int8 test
#: below, ModernBERT's by prune-hidden's and OpenVINO's parity tests), and BERT with each method (the full run's
#: only: zero-scale, the ghosts' graph again with trained scales, and conv, the ghosts' graph with another convolution)
ONNX_CASES = [pytest.param(*p.values, "ghosts", marks=p.marks) for p in family_params(FAMILIES, [])] + [
    ("bert", v) for v in ("grouped", "embeddings", "shared")] + [
    pytest.param("bert", v, marks=pytest.mark.slow) for v in ("conv", "zero-scale")]


@pytest.mark.parametrize("family, variant", ONNX_CASES)
def test_onnx_export_matches_pytorch_on_other_shapes(tmp_path, family, variant):
    pytest.importorskip("onnxruntime")
    source = _chain(tmp_path, family, variant)
    result = steps.export(source, tmp_path / "onnx", format="onnx")
    assert result["max_difference"] <= 1e-4 and result["outputs"] == ["logits"]
    _assert_matches_on_another_padding(source, tmp_path / "onnx" / "model.onnx")


def _assert_matches_on_another_padding(source: Path, graph_file: Path) -> None:
    """The export's own check used its batches; check independently on yet another padding pattern."""
    from ghostify.export.runtime import GraphModel

    net = load_model(source)
    graph = GraphModel(graph_file)
    batch = example_batch(net.config, input_names(net), 4, 17, seed=9)
    batch["attention_mask"][0, 3:] = 0
    with torch.no_grad():
        assert (graph(**batch).logits - net(**batch).logits).abs().max() <= 1e-4


def test_int8_export_runs_and_eval_reads_it(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from ghostify.testing import write_toy_dataset

    source = _chain(tmp_path, "bert", "ghosts")
    code, out, err = run_cli(capsys, "export", source, "-o", tmp_path / "onnx", "--format", "onnx", "--quantize", "int8")
    assert code == 0, err
    assert (tmp_path / "onnx" / "model.onnx").is_file() and (tmp_path / "onnx" / "model_int8.onnx").is_file()
    assert (tmp_path / "onnx" / "model_int8.onnx").stat().st_size < (tmp_path / "onnx" / "model.onnx").stat().st_size
    _assert_matches_on_another_padding(source, tmp_path / "onnx" / "model.onnx")  # BERT's ghosts graph, every day
    data = write_toy_dataset(tmp_path / "data", validation=32)
    scores = {}
    for model in (source, tmp_path / "onnx", tmp_path / "onnx" / "model_int8.onnx"):
        code, out, err = run_cli(capsys, "eval", model, "--dataset", data, "--text-columns", "sentence",
                                 "--label-column", "label", "--json")
        assert code == 0, err
        scores[str(model)] = json.loads(out)["metrics"]["accuracy"]
    assert scores[str(source)] == scores[str(tmp_path / "onnx")]  # fp32: the same predictions


def test_sentence_transformers_layout_is_kept(tmp_path, without_load_check):  # it loads the export itself, below
    sentence_transformers = pytest.importorskip("sentence_transformers")
    st = tmp_path / "st"
    tiny_checkpoint(st, "bert", head="base")
    (st / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (st / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": False}))
    (st / "1_Pooling").mkdir()
    (st / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    (st / "2_Normalize").mkdir()
    steps.prune(st, tmp_path / "pruned", width=0.5)
    steps.attach_ghost(tmp_path / "pruned", tmp_path / "ghost")
    result = steps.export(tmp_path / "ghost", tmp_path / "hf")
    assert result["sentence_transformers"] == str(st)
    assert (tmp_path / "hf" / "modules.json").is_file() and (tmp_path / "hf" / "1_Pooling" / "config.json").is_file()
    with pytest.raises(GhostifyError, match="input"):  # the model it came from is an input too
        steps.export(tmp_path / "ghost", st, overwrite=True)
    assert (st / "modules.json").is_file() and (st / "1_Pooling" / "config.json").is_file()

    sentences = ["the film was great", "a city by the sea at night with music and light"]
    encoder = sentence_transformers.SentenceTransformer(str(tmp_path / "hf"), trust_remote_code=True, device="cpu")
    got = torch.as_tensor(encoder.encode(sentences))
    net = load_model(tmp_path / "ghost")
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(tmp_path / "ghost")(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = net(**tokens).last_hidden_state
    mask = tokens["attention_mask"][..., None].float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    assert torch.allclose(got, expected, atol=1e-5)
    assert got[0].dot(got[1]) < 0.999  # not collapsed: different sentences, different embeddings
    # the export's copy of ghostify's attention kernel, loaded in this process, left ghostify's own in place
    from transformers import AttentionInterface

    from ghostify.attention import ATTENTION, attention_forward

    assert AttentionInterface._global_mapping[ATTENTION] is attention_forward
    copies = [name for name in AttentionInterface._global_mapping if name.startswith("ghostify-")]
    assert copies and all(AttentionInterface._global_mapping[n] is not attention_forward for n in copies)


def test_export_refuses_bad_requests_in_one_line(tmp_path, capsys):
    source = _chain(tmp_path, "bert", "stock")
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "x", "--quantize", "int8")
    assert code != 0 and err.count("\n") == 1 and "--format onnx" in err
    code, _, err = run_cli(capsys, "export", source, "-o", tmp_path / "x", "--format", "tflite")
    assert code != 0 and err.count("\n") == 1 and "hf, onnx" in err
    code, _, err = run_cli(capsys, "export", source, "-o", source)
    assert code != 0 and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_bench_times_checkpoints_and_exports_side_by_side(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    source = _chain(tmp_path, "bert", "stock")
    steps.export(source, tmp_path / "onnx", format="onnx")
    code, out, err = run_cli(capsys, "bench", source, tmp_path / "onnx", "--rounds", "3", "--warmup", "1",
                             "--seq-len", "16", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["runtime"] for r in rows] == ["pytorch", "onnx"]
    assert rows[0]["speedup"] == 1.0 and all(r["median_ms"] > 0 and r["p25_ms"] <= r["p75_ms"] for r in rows)
    code, _, err = run_cli(capsys, "bench", source, "--rounds", "0")
    assert code != 0 and err.count("\n") == 1 and "--rounds 0" in err


def test_bench_sessions_do_not_busy_wait_between_turns(tmp_path, monkeypatch):
    # models take turns in one process: an idle session's spinning worker threads would compete with
    # the running one, so bench's sessions sleep as soon as a run ends; eval keeps ORT's default
    pytest.importorskip("onnxruntime")
    import ghostify.export.runtime as runtime

    source = _chain(tmp_path, "bert", "stock")
    steps.export(source, tmp_path / "onnx", format="onnx")
    made = []
    original = runtime.GraphModel.__init__

    def spy(self, path, *args, **kwargs):
        original(self, path, *args, **kwargs)
        made.append(self.session.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning"))

    monkeypatch.setattr(runtime.GraphModel, "__init__", spy)
    steps.bench([tmp_path / "onnx"], rounds=1, warmup=0, seq_len=16, threads=2)
    assert made == ["0"]
    monkeypatch.undo()
    default = runtime.GraphModel(tmp_path / "onnx" / "model.onnx", threads=2).session.session.get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration"):  # ORT's default: spinning
        default.get_session_config_entry("session.intra_op.allow_spinning")
