"""benchmarks/training_precision.py: each arm runs its command in its own precisions (the teacher's apart from the
student's), a cut-off invocation goes on where it stopped and the report is written from the rows again (a tiny
checkpoint as student and teacher on 64 SST-2 examples: seconds a run)."""

from __future__ import annotations

import argparse
import json

import pytest

from ghostify.testing import tiny_checkpoint

from .conftest import benchmark_module


def test_an_arm_names_its_command_and_its_two_precisions(tmp_path):
    script = benchmark_module("training_precision")
    args = argparse.Namespace(student="S", teacher="T", dataset="D", task="sst2", samples=64, max_length=32)
    distill = script.command_of("distill:no/bf16", args, tmp_path / "out")
    assert distill[3:9] == ["distill", "--student", "S", "--teacher", "T", "-o"]
    assert distill[distill.index("--mixed-precision") + 1] == "no"
    assert distill[distill.index("--teacher-precision") + 1] == "bf16"
    finetune = script.command_of("finetune:bf16", args, tmp_path / "out")
    assert finetune[3:6] == ["finetune", "S", "-o"]
    assert "--teacher" not in finetune and "--teacher-precision" not in finetune
    assert finetune[finetune.index("--mixed-precision") + 1] == "bf16"


@pytest.mark.slow
def test_the_arms_take_turns_resume_and_the_report_is_written_again(tmp_path, glue):
    script = benchmark_module("training_precision")
    model = tiny_checkpoint(tmp_path / "model")
    work, out = tmp_path / "work", tmp_path / "precision.md"
    arms = "distill:no/bf16,finetune:no"
    common = ["--work", str(work), "--student", str(model), "--teacher", str(model), "--dataset", str(glue),
              "--samples", "64", "--max-length", "32", "--output", str(out), "--arms", arms]
    script.main([*common, "--rounds", "1"])
    rows = [json.loads(line) for line in (work / "rows.jsonl").read_text().splitlines()]
    assert [r["arm"] for r in rows] == ["distill:no/bf16", "finetune:no"]
    assert all(r["ms_per_example"] > 0 and r["peak_rss_mb"] > 0 for r in rows)
    assert not any(work.glob("run-*"))  # each run's checkpoint removed after its row
    script.main([*common, "--rounds", "2"])  # the first round kept; the second starts with the other arm
    rows = [json.loads(line) for line in (work / "rows.jsonl").read_text().splitlines()]
    assert [r["arm"] for r in rows][2:] == ["finetune:no", "distill:no/bf16"]
    script.main([*common, "--rounds", "2", "--report-only"])
    table = [line for line in out.read_text().splitlines() if line.startswith("| distill:no/bf16 |")]
    assert len(table) == 1 and table[0].count(",") >= 1  # both rounds' cells
