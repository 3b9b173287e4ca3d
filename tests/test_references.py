"""RefBERT (distill --references): δ-shifted first-layer attention over the input and a reference,
the chunked exact search, the store in the checkpoint, retrieval at inference, resume."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch.nn import functional as F

from ghostify.architectures import get_adapter
from ghostify.checkpoint import load_model, model_record, save_checkpoint
from ghostify.errors import GhostifyError
from ghostify.methods.references import (
    REFERENCES_NAME,
    ReferenceStore,
    check_reference_family,
    find_references,
    install_references,
    nearest,
)
from ghostify.methods.references.apply import reference_record
from ghostify.record import RECORD_KEY
from ghostify.testing import tiny_batch, tiny_checkpoint, tiny_config, tiny_model, write_toy_dataset

from .conftest import ALL_FAMILIES, SDPA_FAMILIES, run_cli

TOY = {"text_columns": ("sentence",), "label_column": "label"}
DELTA = 0.05
EMPTY = 1  # the store entry without tokens


def _store(dt: int = 24, seed: int = 0) -> ReferenceStore:
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 0, 5, 2, 4]
    offsets = torch.tensor([0, *lengths]).cumsum(0)
    keys = F.normalize(torch.randn(len(lengths), dt, generator=g), dim=-1)
    total = int(offsets[-1])
    return ReferenceStore(embeddings=torch.randn(total, dt, generator=g).half(),
                          last=torch.randn(total, dt, generator=g).half(), offsets=offsets,
                          input_ids=torch.randint(5, 99, (total,), generator=g), keys=keys,
                          neighbours=nearest(keys, keys, exclude_self=True))


def _refusal(family: str) -> str | None:
    config = tiny_config(family)
    try:
        check_reference_family(get_adapter(config), config)
    except GhostifyError as exc:
        return str(exc)
    return None


#: RoPE, pre-norm, fused-QKV and grouped-query families refuse references (tested below)
REFERENCE_FAMILIES = [f for f in ALL_FAMILIES if _refusal(f) is None]


@pytest.mark.parametrize("family", [f for f in ALL_FAMILIES if f not in REFERENCE_FAMILIES])
def test_families_without_reference_support_are_refused_in_one_line(family, tmp_path, capsys):
    assert "distill without --references" in _refusal(family)
    with pytest.raises(GhostifyError, match="not supported for"):  # the Python API
        install_references(tiny_model(family), teacher_hidden=24, delta=DELTA)
    tiny_checkpoint(tmp_path / "m", family)
    write_toy_dataset(tmp_path / "data", train=8, validation=4)
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "m", "--student", tmp_path / "m",
                           "-o", tmp_path / "out", "--dataset", tmp_path / "data", "--references")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "not supported for" in err, err
    assert not (tmp_path / "out").exists()


def _with_references(family: str, head: str = "base", dt: int = 24):
    model = tiny_model(family, head, attn_implementation="eager" if family in SDPA_FAMILIES else None)
    plain = copy.deepcopy(model)
    module = install_references(model, teacher_hidden=dt, delta=DELTA)
    module.load_store(_store(dt))
    return plain, model, module


def _layer0_io(model, batch, **forward):
    """(input of the first layer, input of its attention output projection) of one forward."""
    adapter = get_adapter(model.config)
    layer = adapter.layers(model)[0]
    seen = {}
    def keep_input(module, args, kwargs):
        seen.setdefault("x", args[0] if args else next(iter(kwargs.values())))

    def keep_heads(module, args):
        seen.setdefault("heads", args[0])

    h1 = layer.register_forward_pre_hook(keep_input, with_kwargs=True)
    h2 = layer.get_submodule(adapter.paths_for_layer(layer).attention_output).register_forward_pre_hook(keep_heads)
    try:
        out = model(**batch, output_hidden_states=True)
    finally:
        h1.remove(), h2.remove()
    return seen["x"], seen["heads"], out


def _by_hand(model, x, mask, ref_k_in=None, ref_v_in=None, ref_mask=None):
    """(softmax([QKᵀ, QK_refᵀ]/√d) − δ at real keys, 0 at padding) · [V; V_ref], heads concatenated."""
    adapter = get_adapter(model.config)
    layer = adapter.layers(model)[0]
    paths = adapter.paths_for_layer(layer)
    heads = adapter.num_heads(model.config)
    split = lambda t: t.view(t.size(0), t.size(1), heads, -1).transpose(1, 2)  # noqa: E731
    q, k, v = (split(layer.get_submodule(p)(x)) for p in (paths.query, paths.key, paths.value))
    valid = mask.bool()
    if ref_k_in is not None:
        k = torch.cat([k, split(layer.get_submodule(paths.key)(ref_k_in))], 2)
        v = torch.cat([v, split(layer.get_submodule(paths.value)(ref_v_in))], 2)
        valid = torch.cat([valid, ref_mask.bool()], 1)
    scores = (q @ k.transpose(-1, -2)) / q.size(-1) ** 0.5
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    weights = (scores.softmax(-1) - DELTA) * valid[:, None, None, :]
    out = weights @ v
    return out.transpose(1, 2).reshape(x.size(0), x.size(1), -1)


@pytest.mark.parametrize("family", REFERENCE_FAMILIES)
def test_empty_reference_is_delta_shifted_attention(family, monkeypatch):
    """With an EMPTY reference the first layer is ordinary attention whose weights drop by δ at
    real keys: against the family's own eager code with that shift applied to its first softmax,
    and (families without relative positions) against (softmax(QKᵀ/√d) − δ)·V by hand."""
    plain, model, module = _with_references(family)
    batch = tiny_batch()
    mask = batch["attention_mask"].bool()
    with module.given(torch.full((3,), EMPTY)):
        x, heads, out = _layer0_io(model, batch)

    softmax, calls = F.softmax, []

    def shifted_first_softmax(scores, *args, **kwargs):
        probs = softmax(scores, *args, **kwargs)
        calls.append(1)
        if len(calls) > 1:
            return probs
        real = scores > torch.finfo(scores.dtype).min / 2  # the family masks padding with (about) min
        return (probs - DELTA) * real

    monkeypatch.setattr(torch.nn.functional, "softmax", shifted_first_softmax)
    expected = plain(**batch, output_hidden_states=True)
    monkeypatch.undo()
    for got, want in zip(out.hidden_states, expected.hidden_states):
        torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-4)
    if family not in ("deberta-v2", "mpnet"):  # their scores add relative-position terms
        torch.testing.assert_close(heads[mask], _by_hand(model, x, batch["attention_mask"])[mask], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", [f for f in SDPA_FAMILIES if f in REFERENCE_FAMILIES])
def test_reference_keys_and_values_by_hand(family):
    """Keys: the teacher's embedding output of the reference through the student's key weights;
    values: its last layer through the value weights; its padding is masked."""
    _, model, module = _with_references(family, dt=32)
    batch, index = tiny_batch(), torch.tensor([0, 2, 3])
    with module.given(index):
        x, heads, _ = _layer0_io(model, batch)
    emb, last, ref_mask = module.entries_of(index, torch.float32)
    want = _by_hand(model, x, batch["attention_mask"], emb, last, ref_mask)
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(heads[mask], want[mask], atol=1e-5, rtol=1e-4)


def test_a_shared_albert_layer_uses_references_only_in_its_first_application():
    _, model, module = _with_references("albert")
    seen = []
    attention = get_adapter(model.config).layers(model)[0].attention
    original = module.consume
    module.consume = lambda *a, **k: seen.append(r := original(*a, **k)) or r
    with module.given(torch.tensor([0, 2, 3])):
        model(**tiny_batch())
    assert [r is not None for r in seen] == [True, False, False] and attention is not None


def test_teacher_to_student_map_when_hidden_sizes_differ():
    _, model, module = _with_references("bert", dt=24)
    assert module.map is not None and tuple(module.map.weight.shape) == (32, 24)
    assert any("ghostify_reference.map.weight" in k for k in model.state_dict())


def test_chunked_search_equals_brute_force_and_excludes_self():
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(50, 8, generator=g)
    keys[7] = keys[3]  # a duplicate: each must pick the other, never itself
    queries = torch.randn(20, 8, generator=g)
    cos = F.normalize(queries, dim=-1) @ F.normalize(keys, dim=-1).T
    assert torch.equal(nearest(queries, keys, chunk=3), cos.argmax(-1))
    self_cos = F.normalize(keys, dim=-1) @ F.normalize(keys, dim=-1).T
    self_cos.fill_diagonal_(float("-inf"))
    picked = nearest(keys, keys, exclude_self=True, chunk=7)
    assert torch.equal(picked, self_cos.argmax(-1))
    assert not (picked == torch.arange(50)).any() and picked[3] == 7 and picked[7] == 3


def test_delta_outside_the_open_interval_is_a_one_line_error(tmp_path, capsys):
    from ghostify.steps import distill

    for delta in (0.0, 1.0, 1.5):
        with pytest.raises(GhostifyError, match=r"--reference-delta .* must be in \(0, 1\)") as info:
            distill(tmp_path / "t", tmp_path / "s", tmp_path / "d", references=True, reference_delta=delta)
        assert "\n" not in str(info.value)
    (tmp_path / "t").mkdir(), (tmp_path / "s").mkdir()  # the command line checks that the paths exist first
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "t", "--student", tmp_path / "s", "-o",
                           tmp_path / "d", "--references", "--reference-delta", "2")
    assert code != 0 and "--reference-delta 2.0 must be in (0, 1)" in err


def _save_with_references(tmp_path, family="bert"):
    _, model, module = _with_references(family, head="sequence-classification", dt=24)
    record = copy.deepcopy(model_record(model))
    record.methods["references"] = reference_record(module, teacher="synthetic", teacher_hidden=24, student_hidden=32)
    setattr(model.config, RECORD_KEY, record.to_dict())
    tiny_checkpoint(tmp_path / "tok")  # for the tokenizer files
    save_checkpoint(model, tmp_path / "ref", record, tokenizer_source=tmp_path / "tok")
    return model, module


@pytest.mark.parametrize("family", ["bert", "deberta-v2", "mpnet"])
def test_store_save_load_is_exact_and_retrieval_is_used(tmp_path, family):
    model, module = _save_with_references(tmp_path, family)
    # the same attention kernel as the saved model's: eager and SDPA round differently on some CPUs
    loaded = load_model(tmp_path / "ref", attn_implementation=model.config._attn_implementation)
    restored = find_references(loaded)
    for name, tensor in module.store().tensors().items():
        assert torch.equal(tensor, getattr(restored, name)), name
    assert torch.equal(module.ridge, restored.ridge) and restored.delta == DELTA
    data = json.loads((tmp_path / "ref" / "config.json").read_text())["ghostify"]["methods"]["references"]
    assert data["entries"] == 5 and data["retrieval"]["agreement"] == module.agreement
    assert data["bytes"] == restored.store_bytes() > 0
    batch = tiny_batch()
    model.eval()
    torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, atol=0, rtol=0)
    # without references (same weights otherwise) the outputs differ
    bare = tiny_model(family, "sequence-classification")
    bare.load_state_dict({k: v for k, v in loaded.state_dict().items() if "ghostify_reference" not in k})
    last = lambda m: m(**batch, output_hidden_states=True).hidden_states[-1]  # noqa: E731
    assert (last(bare) - last(loaded)).abs().max() > 1e-2


def test_missing_store_is_a_clear_error(tmp_path):
    from ghostify.errors import CheckpointError

    _save_with_references(tmp_path)
    (tmp_path / "ref" / REFERENCES_NAME).unlink()
    with pytest.raises(CheckpointError, match="no references.safetensors"):
        load_model(tmp_path / "ref")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=64, validation=32)


def test_distill_with_references_then_eval_and_info(tmp_path, toy, capsys):
    from ghostify.data import load_split, padding_collator, resolve_task, tokenize
    from ghostify.steps import evaluate, info
    from ghostify.steps.common import load_tokenizer

    tiny_checkpoint(tmp_path / "t", seed=1)
    tiny_checkpoint(tmp_path / "s", seed=2, hidden_size=16, intermediate_size=20)  # a narrower student
    code, _, err = run_cli(capsys, "distill", "--teacher", tmp_path / "t", "--student", tmp_path / "s", "-o", tmp_path / "d",
                           "--dataset", toy, "--text-columns", "sentence", "--label-column", "label", "--epochs", "1",
                           "--batch-size", "16", "--max-samples", "48", "--learning-rate", "1e-3", "--references",
                           "--logit-weight", "1", "--attention-weight", "1")
    assert code == 0, err
    assert "retrieval agreement" in err
    data = json.loads((tmp_path / "d" / "config.json").read_text())["ghostify"]["methods"]["references"]
    assert data["entries"] == 48 and data["teacher_to_student_map"] and 0 <= data["retrieval"]["agreement"] <= 1
    assert (tmp_path / "d" / REFERENCES_NAME).is_file()
    # eval loads the store and retrieves: it equals the in-memory model's predictions
    result = evaluate(tmp_path / "d", dataset=str(toy), **TOY)
    net = load_model(tmp_path / "d")
    rows = load_split(str(toy), resolve_task(None, **TOY), "validation")
    tok = load_tokenizer(tmp_path / "d")
    batch = padding_collator(tok)(list(tokenize(rows, tok)))
    labels = batch.pop("labels")
    with torch.no_grad():
        accuracy = float((net(**batch).logits.argmax(-1) == labels).float().mean())
    assert result["metrics"]["accuracy"] == pytest.approx(accuracy)
    summary = info(tmp_path / "d")
    assert summary["reference_store"]["bytes"] == data["bytes"] and summary["reference_store"]["entries"] == 48


class _Crash(Exception):
    pass


def test_resumed_distill_with_references_equals_uninterrupted(tmp_path, toy):
    from ghostify.steps import distill

    tiny_checkpoint(tmp_path / "t", seed=1)
    tiny_checkpoint(tmp_path / "s", seed=2)
    args = dict(dataset=str(toy), **TOY, epochs=2, batch_size=16, max_samples=48, learning_rate=1e-3,
                checkpoint_steps=2, references=True)
    distill(tmp_path / "t", tmp_path / "s", tmp_path / "whole", **args)

    def crash(step: int) -> None:
        if step == 4:
            raise _Crash

    with pytest.raises(_Crash):
        distill(tmp_path / "t", tmp_path / "s", tmp_path / "resumed", on_step=crash, **args)
    distill(tmp_path / "t", tmp_path / "s", tmp_path / "resumed", resume=True, **args)
    whole, resumed = load_model(tmp_path / "whole"), load_model(tmp_path / "resumed")
    a, b = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    for name, tensor in find_references(whole).store().tensors().items():
        assert torch.equal(tensor, getattr(find_references(resumed), name))
