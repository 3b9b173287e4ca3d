"""Family facts at the edges: the longest input each family reads (one adapter fact, read by
`info`, `bench`, --max-length and the augmentation's masked LM), `bench`'s refusals of lengths and
batches that cannot run, and checkpoints that hold only an encoder while their config.json names a
class with a head (sentence-transformers models)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ghostify.architectures import usable_positions
from ghostify.checkpoint import load_config, load_model
from ghostify.errors import GhostifyError
from ghostify.testing import FAMILIES, tiny_batch, tiny_checkpoint, tiny_model, tiny_tokenizer
from ghostify.tokenization import check_max_length, max_tokens

from .conftest import built_once, run_cli
from .test_bad_input import _check_refused, _fill, world  # noqa: F401

#: rows of the position table before the first token's position, read off each family's
#: transformers modeling code: RoBERTa-style position ids count from padding_idx + 1 (pad_token_id 1
#: in the tiny configs; MPNet fixes padding_idx = 1); every other family counts from 0
OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "roberta-prelayernorm": 2, "xlm-roberta-xl": 2, "mpnet": 2}
POSITIONS = 160  # the tiny configs' max_position_embeddings


def _save_encoder_as(directory: Path, family: str, head: str, edit=None) -> Path:
    """A bare encoder's weights (no prefix, as `AutoModel.save_pretrained` writes them) under a
    config.json whose ``architectures`` names ``family``'s ``head`` class."""
    tiny_model(family, "base").save_pretrained(str(directory))
    tiny_tokenizer(directory)
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = [type(tiny_model(family, head)).__name__]
    (directory / "config.json").write_text(json.dumps(config))
    if edit is not None:
        state = load_file(str(directory / "model.safetensors"))
        edit(state)
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@pytest.fixture(scope="session")
def extra(tmp_path_factory) -> Path:
    """Inputs of the refusals below, beside the shared bad-input world."""
    def build(root: Path) -> None:
        from ghostify import steps

        tiny_checkpoint(root / "bert64", max_position_embeddings=64)
        tiny_checkpoint(root / "bert128", max_position_embeddings=128)
        tiny_checkpoint(root / "roberta128", "roberta", max_position_embeddings=128)
        steps.export(tiny_checkpoint(root / "m160"), root / "onnx", format="onnx")
        _save_encoder_as(root / "enc-missing", "mpnet", "masked-lm",
                         lambda s: s.pop("encoder.layer.0.attention.attn.q.weight"))
        _save_encoder_as(root / "enc-shape", "mpnet", "masked-lm",
                         lambda s: s.__setitem__("encoder.layer.1.intermediate.dense.weight", torch.zeros(5, 32)))
        head = root / "head-partial"  # an MLM checkpoint that lost part of its head
        tiny_model("mpnet", "masked-lm").save_pretrained(str(head))
        tiny_tokenizer(head)
        state = load_file(str(head / "model.safetensors"))
        state.pop("lm_head.dense.weight")
        save_file(state, str(head / "model.safetensors"), metadata={"format": "pt"})
    return built_once(tmp_path_factory, "bad-input-families", build)


def _fill_extra(args: list[str], world: Path, extra: Path, out: Path) -> list[str]:
    """``<name>``: a path under this file's inputs; ``{name}``: one in the shared world."""
    return _fill([re.sub(r"<([\w-]+)>", lambda m: str(extra / m.group(1)), a) for a in args], world, out)


BENCH = ["--rounds", "1", "--warmup", "0"]
CASES: list[tuple[str, list[str], str]] = [
    # bench: lengths beyond a model's positions, checked before anything is timed
    ("bench-seq-len-beyond-checkpoint", ["bench", "{m}", "--seq-len", "161", *BENCH], "--seq-len 161 exceeds the 160 tokens"),
    ("bench-default-seq-len-beyond-64", ["bench", "<bert64>", *BENCH], "--seq-len 128 exceeds the 64 tokens"),
    ("bench-seq-len-beyond-roberta", ["bench", "<roberta128>", "--seq-len", "127", *BENCH], "exceeds the 126 tokens"),
    ("bench-second-model-too-short", ["bench", "{m}", "<bert64>", "--seq-len", "100", *BENCH], "bert64 can read"),
    ("bench-seq-len-beyond-onnx-dir", ["bench", "<onnx>", "--seq-len", "161", *BENCH], "--seq-len 161 exceeds the 160 tokens"),
    ("bench-seq-len-beyond-onnx-file", ["bench", "<onnx>/model.onnx", "--seq-len", "600", *BENCH], "exceeds the 160 tokens"),
    # bench: a batch that cannot fit in memory, refused with what it needs
    ("bench-batch-too-large", ["bench", "{m}", "--batch-size", "100000000", *BENCH], "of memory for the activations"),
    ("bench-batch-too-large-onnx", ["bench", "<onnx>", "--batch-size", "100000000", "--seq-len", "16", *BENCH],
     "more than the"),
    # bench: settings no one can mean
    ("bench-seq-len-zero", ["bench", "{m}", "--seq-len", "0"], "--seq-len 0"),
    ("bench-batch-size-zero", ["bench", "{m}", "--batch-size", "0"], "--batch-size 0"),
    ("bench-threads-zero", ["bench", "{m}", "--threads", "0"], "--threads 0"),
    ("bench-threads-negative", ["bench", "{m}", "--threads", "-2"], "--threads -2"),
    ("bench-rounds-zero", ["bench", "{m}", "--rounds", "0"], "--rounds 0"),
    ("bench-warmup-negative", ["bench", "{m}", "--warmup", "-1"], "--warmup -1"),
    # the limit is exact: one token beyond it is refused, for a BERT and for a RoBERTa
    ("info-seq-len-one-beyond-bert", ["info", "<bert128>", "--seq-len", "129"], "the 128 tokens"),
    ("info-seq-len-one-beyond-roberta", ["info", "<roberta128>", "--seq-len", "127"], "the 126 tokens"),
    ("max-length-one-beyond-roberta", ["finetune", "<roberta128>", "-o", "{out}", "--dataset", "{toy}", "--text-columns",
                                       "sentence", "--max-length", "127"], "exceeds the 126 tokens"),
    # an encoder-only checkpoint is loaded as the encoder, strictly: a damaged encoder stays an error
    ("encoder-only-missing-tensor", ["prune", "<enc-missing>", "-o", "{out}", "--width", "0.5"],
     "missing ['encoder.layer.0.attention.attn.q.weight']"),
    ("encoder-only-mis-shaped-tensor", ["info", "<enc-shape>"], "intermediate.dense.weight has shape (5, 32)"),
    # a head with some tensors present is a damaged checkpoint, not an encoder
    ("head-partially-present", ["prune", "<head-partial>", "-o", "{out}", "--width", "0.5"], "missing ['lm_head.dense.weight']"),
]


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line(name, args, expected, world, extra, tmp_path, capsys):
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill_extra(args, world, extra, out), expected, inputs=(extra,))


def test_an_allocation_failure_while_timing_is_one_line(world, tmp_path, capsys, monkeypatch):
    """Where the estimate lets a batch through that the machine then cannot allocate."""
    bench = importlib.import_module("ghostify.steps.bench")  # the module, not the step function it exports

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:119] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 123456789 bytes")

    monkeypatch.setattr(bench, "example_batch", no_memory)
    out = tmp_path / "out"
    _check_refused(capsys, world, out, _fill(["bench", "{m}", *BENCH], world, out), "ran out of memory at --batch-size 1")


def test_bench_estimate_refuses_only_what_cannot_fit(monkeypatch):
    """The estimate grows with the batch and with the square of the length where scores are
    materialised; a batch is refused exactly when it exceeds the memory available."""
    bench = importlib.import_module("ghostify.steps.bench")  # the module, not the step function it exports

    config = tiny_model("bert").config
    one = bench.activation_bytes(config, 1, 64, scores=False)
    assert bench.activation_bytes(config, 8, 64, scores=False) == 8 * one
    assert bench.activation_bytes(config, 1, 64, scores=True) == one + 4 * 4 * 64 * 64
    monkeypatch.setattr(bench, "available_memory", lambda: 8 * one)
    bench.check_memory("m", config, 8, 64)  # fits exactly
    with pytest.raises(GhostifyError, match="use --batch-size 8 or less"):
        bench.check_memory("m", config, 9, 64)


def test_there_are_enough_new_cases():
    assert len(CASES) >= 10


# ----------------------------------------------------------------------------------------------
# per family: the limit is exact
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_runs_at_its_limit_and_refuses_one_more(family, world, tmp_path, capsys):
    from ghostify.augment import CandidateProposer

    limit = POSITIONS - OFFSET.get(family, 0)
    model = tiny_model(family, "masked-lm")
    assert usable_positions(model.config) == limit
    ids = torch.randint(5, 99, (1, limit + 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids[:, :limit])  # runs at exactly its limit
        if any(name.endswith("position_embeddings") for name, _ in model.named_modules()):
            with pytest.raises((IndexError, RuntimeError)):  # and one more token indexes past its table
                model(input_ids=ids)

    # info --seq-len: at the limit it measures, one beyond it refuses
    checkpoint = tiny_checkpoint(tmp_path / "in" / family, family, head="base")
    code, stdout, stderr = run_cli(capsys, "info", checkpoint, "--seq-len", str(limit), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["seq_len"] == limit
    _check_refused(capsys, world, tmp_path / "out", ["info", str(checkpoint), "--seq-len", str(limit + 1)],
                   f"the {limit} tokens", inputs=(tmp_path / "in",))

    # --max-length
    assert max_tokens(load_config(checkpoint)) == limit
    check_max_length(limit, checkpoint)
    with pytest.raises(GhostifyError, match=f"--max-length {limit + 1} exceeds the {limit} tokens"):
        check_max_length(limit + 1, checkpoint)

    # the augmentation's masked LM reads masked/original pairs of exactly its limit
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    if int(getattr(model.config, "type_vocab_size", 2) or 0) < 2:  # as the family's own tokenizer: no segment ids
        tokenizer.model_input_names = ["input_ids", "attention_mask"]
    proposer = CandidateProposer(model, tokenizer, top_k=3)
    assert proposer.max_model_length == limit
    text = " ".join(["film"] * limit)
    encoded = tokenizer("[MASK] " + text, text, truncation=True, max_length=proposer.max_model_length)
    assert len(encoded["input_ids"]) == limit
    assert len(proposer._predict(["[MASK] " + text], [text], ["film"])) == 1


# ----------------------------------------------------------------------------------------------
# per family: an encoder-only checkpoint whose config names a class with a head
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", ["masked-lm", "sequence-classification"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_encoder_only_checkpoint_loads_as_its_encoder(family, head, tmp_path, capsys):
    source = _save_encoder_as(tmp_path / "st", family, head)
    named = json.loads((source / "config.json").read_text())["architectures"][0]
    encoder = tiny_model(family, "base")  # what was saved (the tiny models are deterministic)

    with pytest.warns(UserWarning, match=f"names {named} but holds only the encoder's weights: loaded the encoder"):
        model = load_model(source)
    assert type(model) is type(encoder)
    state, expected = model.state_dict(), encoder.state_dict()
    assert set(state) == set(expected)
    for key, tensor in expected.items():
        torch.testing.assert_close(state[key], tensor, rtol=0, atol=0)

    # through prune: one warning line, and the result (width 1: every head and neuron, perhaps
    # reordered) computes what the saved encoder computes
    out = tmp_path / "pruned"
    code, _, stderr = run_cli(capsys, "prune", source, "-o", out, "--width", "1")
    assert code == 0, stderr
    assert f"warning: {source} names {named} but holds only the encoder's weights: loaded the encoder " \
        f"({type(encoder).__name__})" in stderr
    assert "error:" not in stderr
    pruned = load_model(out)
    assert type(pruned) is type(encoder)
    batch = tiny_batch()
    with torch.no_grad():
        torch.testing.assert_close(pruned(**batch).last_hidden_state, encoder(**batch).last_hidden_state,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("positions", [64, 128], ids=["64-positions", "128-positions"])
def test_a_recipe_runs_on_a_model_with_few_positions(positions, extra, tmp_path, capsys):
    """`run` and `run --dry-run` report sizes at 128 tokens, or at all a model reads when that is
    fewer (a BERT with 128 positions was refused at 126; one with 64 could never finish a run)."""
    from ghostify.testing import write_toy_dataset

    toy = write_toy_dataset(tmp_path / "toy", train=16, validation=8)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {extra / f'bert{positions}'}\n"
                      f"data: {{dataset: {toy}, text_columns: [sentence], label_column: label, max_length: 32}}\n"
                      "stages:\n  - prune: {width: 0.5}\n  - attach-ghost: {}\n")
    code, out, err = run_cli(capsys, "run", recipe, "-o", tmp_path / "plan", "--dry-run")
    assert code == 0, err
    code, out, err = run_cli(capsys, "run", recipe, "-o", tmp_path / "run")
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert all(row["flops"] > 0 for row in report["stages"]), report
