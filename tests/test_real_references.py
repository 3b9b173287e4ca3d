"""On the real MiniLM: RefBERT end to end — the SST-2 teacher pruned to half width, distilled with
references to the teacher's pre-computed representations of similar training sentences, fine-tuned
and evaluated (eval retrieves references from the checkpoint's store, without the teacher). It checks the chain
works on real data; what references buy against the same chain without them is a study, not a test."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.real


def test_prune_distill_with_references_finetune_eval(sst2_teacher, sst2_epoch_check, glue, tmp_path, capsys):
    def ok(*args):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        return out, err

    sst2 = ["--dataset", glue, "--task", "sst2", "--max-length", "64", "--max-samples", "500", "--epochs", "1",
            "--validation-file", sst2_epoch_check]
    ok("prune", sst2_teacher, "-o", tmp_path / "pruned", "--width", "0.5")
    _, err = ok("distill", "--teacher", sst2_teacher, "--student", tmp_path / "pruned", "-o", tmp_path / "distilled",
                *sst2, "--learning-rate", "2e-4", "--logit-weight", "1", "--attention-weight", "1", "--references",
                "--reference-delta", "0.01")
    assert "retrieval agreement" in err
    ok("finetune", tmp_path / "distilled", "-o", tmp_path / "final", *sst2, "--learning-rate", "5e-5")
    result = json.loads(ok("eval", tmp_path / "final", "--dataset", glue, "--task", "sst2", "--json")[0])
    assert result["samples"] == 872
    record = json.loads((tmp_path / "final" / "config.json").read_text())["ghostify"]["methods"]["references"]
    assert record["entries"] == 500 and (tmp_path / "final" / "references.safetensors").is_file()
    info = json.loads(ok("info", tmp_path / "final", "--json")[0])
    with capsys.disabled():
        print("store", info["reference_store"], "agreement", record["retrieval"]["agreement"])
        print("sst2 accuracy", result["metrics"])
    # SST-2 validation: 444 positive of 872; 0.7317 in a run (torch 2.13 CPU, one thread)
    assert result["metrics"]["accuracy"] > 0.7 > 444 / 872
