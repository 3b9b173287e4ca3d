"""End to end on the real MiniLM and SST-2 (1,500 training examples after the shared teacher):
finetune a teacher -> prune 0.5 -> attach-ghost -> distill -> finetune with the teacher -> eval."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.real



def test_prune_ghost_distill_finetune_beats_the_majority_class(sst2_teacher, sst2_epoch_check, glue, tmp_path, capsys):
    data = ["--dataset", glue, "--task", "sst2", "--epochs", "1", "--validation-file", sst2_epoch_check]

    def ok(*args):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        return out

    teacher = sst2_teacher  # MiniLM fine-tuned on 2,000 examples, 1 epoch, lr 1e-4
    ok("prune", teacher, "-o", tmp_path / "pruned", "--width", "0.5")
    ok("attach-ghost", tmp_path / "pruned", "-o", tmp_path / "ghost")
    ok("distill", "--teacher", teacher, "--student", tmp_path / "ghost", "-o", tmp_path / "distilled",
       *data, "--learning-rate", "2e-4", "--max-samples", "500")
    ok("finetune", tmp_path / "distilled", "-o", tmp_path / "final", *data, "--max-samples", "1000", "--teacher", teacher,
       "--teacher-weight", "0.5", "--learning-rate", "1e-4")
    result = json.loads(ok("eval", tmp_path / "final", "--dataset", glue, "--task", "sst2", "--json"))
    assert result["samples"] == 872
    majority = 444 / 872  # SST-2 validation: 444 positive of 872
    with capsys.disabled():
        print(f"prune 0.5 -> ghost -> distill -> finetune: SST-2 accuracy {result['metrics']['accuracy']:.4f}")
    # 0.7615 in a run (torch 2.13 CPU, one thread) on these 1,500 training examples; 0.7741 on the 3,000
    # the chain read before, for which 0.75 was the bar
    assert result["metrics"]["accuracy"] > 0.73 > majority
    info = json.loads(ok("info", tmp_path / "final", "--json"))
    assert info["heads_per_layer"] == [6] * 6 and info["ghost"]
    assert [h["command"] for h in info["history"]] == ["finetune", "prune", "attach-ghost", "distill", "finetune"]
