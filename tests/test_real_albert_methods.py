"""On the real MiniLM and SST-2: ALBERT's two parameter reductions, each recovered by distillation
from the fine-tuned teacher, fine-tuned and evaluated (small subsets: a few minutes on CPU)."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.real

MAJORITY = 444 / 872  # SST-2 validation: 444 positive of 872


def _recover_and_evaluate(ok, glue, check, teacher, student, tmp_path) -> dict:
    data = ["--dataset", glue, "--task", "sst2", "--max-length", "64", "--epochs", "1", "--validation-file", check]
    ok("distill", "--teacher", teacher, "--student", student, "-o", tmp_path / "distilled", *data,
       "--max-samples", "500", "--learning-rate", "2e-4")
    ok("finetune", tmp_path / "distilled", "-o", tmp_path / "final", *data, "--max-samples", "1000",
       "--teacher", teacher, "--teacher-weight", "0.5", "--learning-rate", "1e-4")
    return json.loads(ok("eval", tmp_path / "final", "--dataset", glue, "--task", "sst2", "--json"))


def _report(capsys, *parts) -> None:
    with capsys.disabled():  # not into the next command's captured output
        print(*parts)


def _cli(capsys):
    def ok(*args):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        return out

    return ok


def test_factorized_embeddings_distill_finetune(sst2_teacher, sst2_epoch_check, glue, tmp_path, capsys):
    ok = _cli(capsys)
    ok("factorize-embeddings", sst2_teacher, "-o", tmp_path / "factorized", "--rank", "128")
    record = json.loads((tmp_path / "factorized" / "config.json").read_text())["ghostify"]["methods"]["embeddings"]
    _report(capsys, "factorize rank 128:", {k: record[k] for k in ("error", "params_before", "params_after", "params_saved")})
    assert record["params_before"] == 30522 * 384 and record["params_after"] == 128 * (30522 + 384)
    assert record["error"] < 0.8  # pretrained embeddings are far from a flat spectrum (random: ~0.89)
    before = json.loads(ok("eval", tmp_path / "factorized", "--dataset", glue, "--task", "sst2", "--json",
                           "--max-samples", "200"))  # shown only: what distillation starts from
    result = _recover_and_evaluate(ok, glue, sst2_epoch_check, sst2_teacher, tmp_path / "factorized", tmp_path)
    _report(capsys, "sst2 factorized before training:", before["metrics"], "after distill + finetune:", result["metrics"])
    assert result["samples"] == 872
    assert result["metrics"]["accuracy"] > 0.7 > MAJORITY  # 0.7856 in a run (torch 2.13 CPU, one thread)
    info = json.loads(ok("info", tmp_path / "final", "--json"))
    assert info["embeddings"]["rank"] == 128
    assert [h["command"] for h in info["history"]][-3:] == ["factorize-embeddings", "distill", "finetune"]


def test_shared_layers_distill_finetune(sst2_teacher, sst2_epoch_check, glue, tmp_path, capsys):
    ok = _cli(capsys)
    ok("share-layers", sst2_teacher, "-o", tmp_path / "shared", "--groups", "3")
    info = json.loads(ok("info", tmp_path / "shared", "--json"))
    _report(capsys, "share-layers groups 3:", info["sharing"]["params_before"], "->", info["sharing"]["params_after"])
    assert info["layer_applications"] == [2, 2, 2] and info["heads_per_layer"] == [12, 12, 12]
    result = _recover_and_evaluate(ok, glue, sst2_epoch_check, sst2_teacher, tmp_path / "shared", tmp_path)
    _report(capsys, "sst2 shared (3 groups) after distill + finetune:", result["metrics"])
    assert result["samples"] == 872
    assert result["metrics"]["accuracy"] > 0.7 > MAJORITY  # 0.7443 in a run (torch 2.13 CPU, one thread)
    final = json.loads(ok("info", tmp_path / "final", "--json"))
    assert final["layer_applications"] == [2, 2, 2] and final["params"] == info["params"]
