"""The teacher store: the teacher's outputs computed once per example, kept in float16 at the real tokens, and
read back by every later epoch and by any run or stage that names the same store."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ghostify import load_model
from ghostify.errors import GhostifyError
from ghostify.testing import tiny_checkpoint, write_toy_dataset
from ghostify.training.teacher_store import Field, TeacherStore, example_keys

TOY = {"text_columns": ("sentence",), "label_column": "label"}
TRAIN = {"epochs": 2, "batch_size": 16, "learning_rate": 3e-3, "max_samples": 96}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "data", train=256, validation=64)


@pytest.fixture(scope="module")
def pair(tmp_path_factory, toy):
    """A tiny teacher fine-tuned on the toy task and a pruned student of it."""
    from ghostify.steps import finetune, prune

    root = tmp_path_factory.mktemp("pair")
    tiny_checkpoint(root / "init")
    finetune(root / "init", root / "teacher", dataset=str(toy), **TOY, epochs=4, batch_size=16, learning_rate=3e-3)
    prune(root / "teacher", root / "student", width="2/4")
    return root / "teacher", root / "student"


def _weights(path):
    return load_model(path).state_dict()


def _same(a, b) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _store_note(path):
    return json.loads((path / "training.json").read_text())["teacher_outputs"]


def test_keys_depend_on_the_tokens_alone():
    rows = [{"input_ids": [101, 7, 8, 102], "token_type_ids": [0, 0, 0, 0]},
            {"input_ids": [101, 7, 8, 102], "token_type_ids": [0, 0, 1, 1]},
            {"input_ids": [101, 7, 8, 102], "token_type_ids": [0, 0, 0, 0]}]
    keys = example_keys(rows)
    assert keys[0] == keys[2] != keys[1] and all(0 <= k < 2**63 for k in keys)


def test_stored_rows_read_back_as_written_and_padding_is_zero(tmp_path):
    store = TeacherStore(tmp_path / "store", "teacher-id", cap_bytes=1 << 20).open(tmp_path / "unused")
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    hidden = torch.randn(2, 4, 3)
    logits = torch.randn(2, 2)
    fields = [Field("hidden.1", True), Field("output.logits", False)]
    calls = []

    def compute(rows):
        calls.append(rows.tolist())
        return {"hidden.1": hidden[rows], "output.logits": logits[rows]}

    keys = torch.tensor([11, 12])
    first = store.fetch(keys, mask, fields, compute)
    store.close()
    reopened = TeacherStore(tmp_path / "store", "teacher-id", cap_bytes=1 << 20).open(tmp_path / "unused")
    second = reopened.fetch(keys, mask, fields, compute)
    assert calls == [[0, 1]]  # computed once, then read back
    for name in first:
        assert torch.equal(first[name], second[name])
    # float16 of the computed values at the real tokens, zeros at the padding
    expected = hidden.half().float() * mask.unsqueeze(-1)
    assert torch.equal(second["hidden.1"], expected)
    assert torch.equal(second["output.logits"], logits.half().float())
    assert (second["hidden.1"] - hidden * mask.unsqueeze(-1)).abs().max() <= 1e-3 * hidden.abs().max()
    assert reopened.reused == 2 and reopened.computed == 0


def test_rows_read_back_under_bf16_autocast_as_without_it(tmp_path):
    """compress trains in bf16 where the CPU has it: the store's float16 rows are read back inside CPU autocast,
    whose cat refused float16 ("Unexpected floating ScalarType in at::autocast::prioritize")."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    hidden = torch.randn(2, 3, 4)
    fields = [Field("hidden.1", True), Field("output.logits", False)]

    def compute(rows):
        return {"hidden.1": hidden[rows], "output.logits": hidden[rows, 0]}

    plain = TeacherStore(tmp_path / "a", "t", cap_bytes=1 << 20).open(tmp_path)
    expected = [plain.fetch(torch.tensor([1, 2]), mask, fields, compute) for _ in range(2)]  # computed, then read
    store = TeacherStore(tmp_path / "b", "t", cap_bytes=1 << 20).open(tmp_path)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = [store.fetch(torch.tensor([1, 2]), mask, fields, compute) for _ in range(2)]
    assert store.reused == 2
    for e, g in zip(expected, got):
        assert all(g[name].dtype == torch.float32 and torch.equal(e[name], g[name]) for name in e)


def test_a_partly_stored_batch_computes_only_its_missing_rows(tmp_path):
    store = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    mask = torch.ones(3, 2, dtype=torch.long)
    values = torch.arange(6.0).reshape(3, 2)
    seen = []

    def compute(rows):
        seen.append(rows.tolist())
        return {"output.logits": values[rows]}

    fields = [Field("output.logits", False)]
    store.fetch(torch.tensor([1, 2]), mask[:2], fields, lambda rows: {"output.logits": values[:2][rows]})
    out = store.fetch(torch.tensor([2, 3, 1]), mask, fields, compute)
    assert seen == [[1]]  # key 3 alone is new; it sits in row 1 of this batch
    assert torch.equal(out["output.logits"], torch.stack([values[1], values[1], values[0]]))


def test_the_cap_keeps_what_fits_and_the_rest_is_computed(tmp_path):
    # two rows of two float16 values (the cap less its reserve for the head's outputs, which these are not)
    store = TeacherStore(tmp_path, "t", cap_bytes=9).open(tmp_path)
    fields = [Field("hidden.0", False)]
    mask = torch.ones(3, 2, dtype=torch.long)
    store.fetch(torch.tensor([1, 2, 3]), mask, fields, lambda rows: {"hidden.0": torch.ones(len(rows), 2)})
    assert store.stored == 2 and store.bytes == 8
    store.fetch(torch.tensor([1, 2, 3]), mask, fields, lambda rows: {"hidden.0": torch.ones(len(rows), 2)})
    assert store.reused == 2 and store.computed == 4


def test_past_the_cap_for_hidden_states_a_row_keeps_its_heads_outputs_for_the_fine_tune(tmp_path):
    from ghostify.training.teacher_store import HEAD_RESERVE

    # a row: 2 tokens x 4 float16 of hidden state (16 bytes) and 2 float16 logits (4 bytes); the cap holds two
    # whole rows (40 bytes) in the part that is not the head's reserve, and 64 rows' logits in its reserve
    cap = 1024
    hidden_room = int(cap * (1 - HEAD_RESERVE))
    store = TeacherStore(tmp_path, "t", cap_bytes=cap).open(tmp_path)
    mask = torch.ones(1, 2, dtype=torch.long)
    fields = [Field("hidden.1", True), Field("output.logits", False, head=True)]
    keys = list(range(1, 81))
    for key in keys:
        store.fetch(torch.tensor([key]), mask, fields, lambda rows, key=key: {
            "hidden.1": torch.full((len(rows), 2, 4), float(key)), "output.logits": torch.full((len(rows), 2), -key)})
    whole = hidden_room // 20
    assert store.stored == whole and store.head_only > 0 and store.bytes <= cap
    assert store.head_only == (cap - 20 * whole) // 4  # the logits of every later row that fits the whole cap
    # a distillation reads whole rows: the ones over the hidden states' part are computed again
    assert all(store.holds(k, fields) for k in keys[:whole]) and not store.holds(keys[whole], fields)
    # the fine-tune reads the logits alone: every row that fitted them is read back, its values as written
    logits = [Field("output.logits", False, head=True)]
    kept = whole + store.head_only
    computed = []
    out = store.fetch(torch.tensor(keys[:kept]), torch.ones(kept, 2, dtype=torch.long), logits,
                      lambda rows: computed.append(rows) or {"output.logits": torch.zeros(len(rows), 2)})
    assert not computed
    assert torch.equal(out["output.logits"], -torch.tensor(keys[:kept], dtype=torch.float32)[:, None].expand(kept, 2))


def test_the_store_times_its_own_work_apart_from_the_teachers_pass(tmp_path):
    """What a time budget weighs against the teacher's pass: the store's seconds on batches it computed and stored,
    and on batches it read back whole; the teacher's own pass (here 0.3 s of sleep) is in neither."""
    import time

    store = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    fields = [Field("hidden.1", True), Field("output.logits", False, head=True)]
    mask = torch.ones(4, 3, dtype=torch.long)

    def teacher(rows):
        time.sleep(0.3)
        return {"hidden.1": torch.ones(len(rows), 3, 8), "output.logits": torch.zeros(len(rows), 2)}

    store.fetch(torch.arange(4), mask, fields, teacher)
    assert 0 < store.seconds["storing"] < 0.3 and store.seconds["reading"] == 0
    store.fetch(torch.arange(4), mask, fields, teacher)  # read back whole: the teacher is not run
    assert 0 < store.seconds["reading"] < 0.3 and store.computed == 4 and store.reused == 4
    assert store.summary()["seconds"] == {k: round(v, 3) for k, v in store.seconds.items()}
    store.close()


def test_bytes_written_after_the_last_flush_are_dropped_on_reopening(tmp_path):
    store = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    fields = [Field("output.logits", False)]
    mask = torch.ones(1, 2, dtype=torch.long)
    store.fetch(torch.tensor([1]), mask, fields, lambda rows: {"output.logits": torch.ones(1, 2)})
    store.flush()
    store.fetch(torch.tensor([2]), mask, fields, lambda rows: {"output.logits": torch.ones(1, 2)})
    store._writer("output.logits").flush()  # on disk, not indexed: as a crash before the next flush leaves it
    directory = store.directory
    store._lock.__exit__(None, None, None)  # a crash: no close()
    reopened = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    assert (directory / "output.logits.bin").stat().st_size == 4
    assert reopened.holds(1, fields) and not reopened.holds(2, fields)


def test_a_run_killed_before_its_first_flush_leaves_a_store_that_opens_and_fills(tmp_path):
    # seen on a resumed compress: the field's file held 20 MB, no index named it, and the next write refused
    store = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    fields = [Field("output.logits", False)]
    mask = torch.ones(1, 2, dtype=torch.long)
    store.fetch(torch.tensor([1]), mask, fields, lambda rows: {"output.logits": torch.ones(1, 2)})
    store._writer("output.logits").flush()
    directory = store.directory
    store._lock.__exit__(None, None, None)  # a crash before any flush: no index at all
    assert not (directory / "index.npz").exists() and (directory / "output.logits.bin").stat().st_size == 4
    reopened = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    got = reopened.fetch(torch.tensor([1]), mask, fields, lambda rows: {"output.logits": torch.full((1, 2), 3.0)})
    assert torch.equal(got["output.logits"], torch.full((1, 2), 3.0)) and reopened.holds(1, fields)
    reopened.close()
    assert (directory / "output.logits.bin").stat().st_size == 4


def test_a_damaged_index_is_one_line(tmp_path):
    store = TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)
    directory = store.directory
    store.close()
    (directory / "index.npz").write_bytes(b"not an index")
    with pytest.raises(GhostifyError, match="damaged.*remove"):
        TeacherStore(tmp_path, "t", cap_bytes=1 << 20).open(tmp_path)


def test_distill_reads_the_teacher_once_and_equals_computing_it_at_every_step_up_to_float16(tmp_path, pair, toy):
    from ghostify.steps import distill

    teacher, student = pair
    common = dict(dataset=str(toy), **TOY, **TRAIN, logit_weight=1.0)
    distill(teacher, student, tmp_path / "stored", **common)
    distill(teacher, student, tmp_path / "computed", teacher_store_gb=0, **common)
    note = _store_note(tmp_path / "stored")
    assert note["computed"] == 96 and note["reused"] == 96  # epoch 1 computes, epoch 2 reads back
    assert "teacher_outputs" not in json.loads((tmp_path / "computed" / "training.json").read_text())
    stored, computed = _weights(tmp_path / "stored"), _weights(tmp_path / "computed")
    worst = max(float((stored[k] - computed[k]).abs().max()) for k in stored)
    assert 0 < worst < 5e-3  # float16 targets move the weights, by little
    assert not (tmp_path / "stored.partial").exists()  # the run's own store went with OUT.partial


def test_two_fresh_runs_and_a_run_on_a_full_store_write_the_same_bytes(tmp_path, pair, toy):
    from ghostify.steps import distill

    teacher, student = pair
    common = dict(dataset=str(toy), **TOY, **TRAIN)
    distill(teacher, student, tmp_path / "a", teacher_store=str(tmp_path / "store-a"), **common)
    distill(teacher, student, tmp_path / "b", teacher_store=str(tmp_path / "store-b"), **common)
    distill(teacher, student, tmp_path / "c", teacher_store=str(tmp_path / "store-a"), **common)  # all read back
    distill(teacher, student, tmp_path / "d", teacher_store=str(tmp_path / "store-d"), teacher_store_gb=1e-6,
            **common)  # almost nothing fits: computed at every step, still through float16
    assert _store_note(tmp_path / "c")["computed"] == 0
    assert _store_note(tmp_path / "d")["stored"] < 10
    a = _weights(tmp_path / "a")
    for other in "bc":
        assert _same(a, _weights(tmp_path / other)), other
    # computed again in other batches (another padded length), the teacher's float32 sums can round to another
    # float16 now and then: close, not the same bytes
    d = _weights(tmp_path / "d")
    assert max(float((a[k] - d[k]).abs().max()) for k in a) < 1e-3


def test_the_teachers_passes_in_bf16_key_their_own_store_and_leave_the_student_in_float32(tmp_path, pair, toy):
    """--teacher-precision bf16 with a float32 student: the store of its outputs has a key of its own (bf16 rounds
    more coarsely than the stored float16: a float32 run must not read them), the student's weights differ from an
    all-float32 run's by the teacher's rounding alone, and a run on that store reads back what the first computed."""
    from ghostify.steps import distill
    from ghostify.training.teacher_store import fingerprint

    teacher, student = pair
    common = dict(dataset=str(toy), **TOY, **TRAIN, teacher_store=str(tmp_path / "store"))
    distill(teacher, student, tmp_path / "fp32", **common)
    distill(teacher, student, tmp_path / "bf16", teacher_precision="bf16", **common)
    assert fingerprint(teacher, "no") == fingerprint(teacher) != fingerprint(teacher, "bf16")
    assert {p.name for p in (tmp_path / "store").iterdir()} == {fingerprint(teacher), fingerprint(teacher, "bf16")}
    assert _store_note(tmp_path / "bf16")["computed"] == 96  # not the float32 run's outputs
    settings = json.loads((tmp_path / "bf16" / "training.json").read_text())["settings"]
    assert settings["mixed_precision"] == "no" and settings["teacher_precision"] == "bf16"
    fp32, bf16 = _weights(tmp_path / "fp32"), _weights(tmp_path / "bf16")
    assert 0 < max(float((fp32[k] - bf16[k]).abs().max()) for k in fp32) < 5e-2
    distill(teacher, student, tmp_path / "again", teacher_precision="bf16", **common)
    assert _store_note(tmp_path / "again")["computed"] == 0 and _same(bf16, _weights(tmp_path / "again"))


def test_a_teachers_precision_applies_to_its_pass_alone():
    """The objective's teacher in float32 inside the student's bf16 autocast gives its float32 outputs exactly; in
    bf16 under a float32 student, autocast's outputs handed on in float32."""
    from transformers import BertConfig, BertForSequenceClassification

    from ghostify.training.loop import Objective

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                     intermediate_size=64, vocab_size=99))
    objective = Objective()
    objective.__dict__["_teacher"] = model
    ids = torch.randint(0, 99, (2, 7))

    def outputs(precision, autocast):
        objective.teacher_precision = precision
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = objective.run_teacher(torch.device("cpu"), input_ids=ids, output_hidden_states=True)
        return [out.logits, *out.hidden_states]

    plain = outputs(None, False)
    assert all(torch.equal(a, b) for a, b in zip(outputs("no", True), plain))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, output_hidden_states=True)
    reduced = outputs("bf16", False)
    assert all(t.dtype == torch.float32 for t in reduced)
    assert all(torch.equal(a, b.float()) for a, b in zip(reduced, [out.logits, *out.hidden_states]))
    assert not all(torch.equal(a, b) for a, b in zip(reduced, plain))


def test_a_finetune_reads_the_logits_its_distill_stored(tmp_path, pair, toy):
    from ghostify.steps import distill, finetune

    teacher, student = pair
    store = str(tmp_path / "store")
    distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, **TRAIN, teacher_store=store)
    finetune(tmp_path / "d", tmp_path / "f", dataset=str(toy), **TOY, **TRAIN, teacher=str(teacher),
             teacher_store=store)
    assert _store_note(tmp_path / "f")["computed"] == 0


def test_a_resumed_run_with_a_store_equals_an_uninterrupted_one(tmp_path, pair, toy):
    from ghostify.steps import distill

    class Crash(Exception):
        pass

    def crash(step):
        if step == 9:  # mid epoch 2 (6 steps an epoch)
            raise Crash

    teacher, student = pair
    common = dict(dataset=str(toy), **TOY, **TRAIN, checkpoint_steps=4)
    distill(teacher, student, tmp_path / "whole", **common)
    with pytest.raises(Crash):
        distill(teacher, student, tmp_path / "resumed", on_step=crash, **common)
    assert (tmp_path / "resumed.partial" / "teacher-outputs").is_dir()
    distill(teacher, student, tmp_path / "resumed", resume=True, **common)
    assert _same(_weights(tmp_path / "whole"), _weights(tmp_path / "resumed"))


#: a process killed the moment its first training state is saved (``os._exit``: no ``finally`` runs, as under
#: SIGKILL)
_KILLED_AFTER_SAVING = """
import json, os, sys
import torch
from ghostify.steps import distill
from ghostify.training import loop

real = loop._save_state


def save_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os._exit(3)


loop._save_state = save_then_die
teacher, student, out, settings, threads = sys.argv[1:]
torch.set_num_threads(int(threads))  # the test's own: the resumed steps must compute as the uninterrupted ones
distill(teacher, student, out, **json.loads(settings))
"""


def test_a_saved_state_never_counts_steps_whose_teacher_outputs_are_not_durable(tmp_path, pair, toy):
    """Killed the moment a state is saved (here: the first, at step 4 of 16 rows each), the store's index already
    holds every row those steps read: the store is flushed before the state is written. In the other order a kill
    between the two lost the rows; the resumed run computed them again inside other batches, padded to other
    lengths, where a value can round to another float16 (a killed run's resume differed once in CI)."""
    import subprocess
    import sys

    from ghostify.steps import distill

    teacher, student = pair
    common = dict(dataset=str(toy), **TOY, **TRAIN, checkpoint_steps=4)
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_SAVING, str(teacher), str(student),
                             str(tmp_path / "resumed"), json.dumps(common), str(torch.get_num_threads())],
                            capture_output=True, text=True)
    assert killed.returncode == 3, killed.stderr[-2000:]
    state = json.loads((tmp_path / "resumed.partial" / "state" / "progress.json").read_text())
    assert state["step"] == 4
    store = TeacherStore(tmp_path / "resumed.partial" / "teacher-outputs", teacher, 2**30)
    store.open(tmp_path)
    try:
        assert store.columns and min(len(c.offsets) for c in store.columns.values()) >= 4 * 16
    finally:
        store.close()
    distill(teacher, student, tmp_path / "resumed", resume=True, **common)
    distill(teacher, student, tmp_path / "whole", **common)
    assert _same(_weights(tmp_path / "whole"), _weights(tmp_path / "resumed"))


def test_bad_store_settings_are_one_line(tmp_path, pair, toy):
    from ghostify.steps import distill

    teacher, student = pair
    with pytest.raises(GhostifyError, match="--teacher-store-gb -1"):
        distill(teacher, student, tmp_path / "x", dataset=str(toy), **TOY, teacher_store_gb=-1)
    with pytest.raises(GhostifyError, match="inside the input --teacher .*choose another --teacher-store"):
        distill(teacher, student, tmp_path / "x", dataset=str(toy), **TOY, teacher_store=str(teacher / "store"))
    with pytest.raises(GhostifyError, match="--teacher-precision 'int8': choose one of no, fp16, bf16"):
        distill(teacher, student, tmp_path / "x", dataset=str(toy), **TOY, teacher_precision="int8")


def test_a_teachers_precision_without_a_teacher_is_one_line(tmp_path, pair, toy):
    from ghostify.steps import finetune

    _, student = pair
    with pytest.raises(GhostifyError, match="--teacher-precision bf16 sets the precision of a teacher's passes, but "
                                            "this fine-tune has no --teacher"):
        finetune(student, tmp_path / "x", dataset=str(toy), **TOY, teacher_precision="bf16")
    assert not (tmp_path / "x").exists()


# ---- distill --masked-copies: the training texts with some words masked, labels unread -------------------------
def test_distill_reads_the_texts_and_their_masked_copies(tmp_path, pair, toy):
    from ghostify.steps import distill

    teacher, student = pair
    result = distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, masked_copies=2, epochs=1,
                     batch_size=16, max_samples=64, logit_weight=1.0, teacher_store=str(tmp_path / "store"))
    assert result.steps == 12  # 64 texts and two masked copies of each, 16 a step
    run = json.loads((tmp_path / "d" / "training.json").read_text())
    assert run["train"]["samples"] == 192 and "2 masked copies" in run["train"]["dataset"]
    # a copy is a new input for the teacher unless no word of its short text was masked (it is then the text again)
    assert 64 < run["teacher_outputs"]["computed"] < 192
    assert load_model(tmp_path / "d").config.ghostify["history"][-1]["arguments"]["masked_copies"] == 2
    # the same command again writes the same weights (the copies are seeded)
    again = distill(teacher, student, tmp_path / "e", dataset=str(toy), **TOY, masked_copies=2, epochs=1,
                    batch_size=16, max_samples=64, logit_weight=1.0, teacher_store=str(tmp_path / "store-e"))
    assert _same(_weights(tmp_path / "d"), _weights(tmp_path / "e"))


def test_masked_copies_without_texts_of_their_own_are_refused_in_one_line(tmp_path, pair, toy):
    from ghostify.steps import distill

    teacher, student = pair
    with pytest.raises(GhostifyError, match="--masked-copies 1 adds texts without segment order"):
        distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, masked_copies=1, sop_weight=1.0)
    with pytest.raises(GhostifyError, match="--masked-copies -2 must be a whole number"):
        distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, masked_copies=-2)
    assert not (tmp_path / "d").exists()
    # refused among the arguments, which a recipe checks for every stage before its first runs
    with pytest.raises(GhostifyError, match=r"^--unlabelled more.txt adds texts without references; distill with "
                                            r"--no-references, or without --unlabelled$"):
        distill.check_arguments(references=True, unlabelled="more.txt")


# ---- distill --unlabelled: the user's own text, labels unread ------------------------------------------------
def test_unlabelled_text_is_distilled_with_the_training_split(tmp_path, pair, toy):
    from ghostify.steps import distill
    from ghostify.testing import write_toy_sentences

    teacher, student = pair
    extra = write_toy_sentences(tmp_path / "more.txt", count=40, seed=3)
    result = distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, unlabelled=str(extra), epochs=1,
                     batch_size=16)
    assert result.steps == 19  # 256 training texts and 40 more, 16 a step
    history = load_model(tmp_path / "d").config.ghostify["history"][-1]
    assert history["arguments"]["unlabelled"] == str(extra)
    train = json.loads((tmp_path / "d" / "training.json").read_text())["train"]
    assert train["samples"] == 296 and str(extra) in train["dataset"]
    capped = distill(teacher, student, tmp_path / "e", dataset=str(toy), **TOY, unlabelled=str(extra), epochs=1,
                     batch_size=16, max_samples=32)
    assert capped.steps == 2


@pytest.mark.parametrize("content, name, match", [
    ("sentence1,sentence2\na,b\n", "pairs.csv", "has no column 'sentence'"),
    ("some text\n", "notes.md", "not a kind of file"),
    (None, "missing.txt", "is not a file"),
])
def test_bad_unlabelled_files_are_one_line(tmp_path, pair, toy, content, name, match):
    from ghostify.steps import distill

    teacher, student = pair
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(GhostifyError, match=match):
        distill(teacher, student, tmp_path / "d", dataset=str(toy), **TOY, unlabelled=str(path), epochs=1)
    assert not (tmp_path / "d").exists() and not (tmp_path / "d.partial").exists()


def test_a_text_file_for_a_pair_task_is_refused(tmp_path):
    from ghostify.data import load_unlabelled, resolve_task

    (tmp_path / "t.txt").write_text("one text\n")
    with pytest.raises(GhostifyError, match="reads 2 columns"):
        load_unlabelled(str(tmp_path / "t.txt"), resolve_task("mrpc"))
