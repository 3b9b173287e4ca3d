"""benchmarks/kernel_cache.py: each arm's fine-tune runs with its own cache size, oneDNN's kernels are counted from
its verbose lines (bf16 makes kernels, float32 almost none), a cut-off invocation goes on where it stopped and the
report is written from the rows again (a tiny checkpoint on 64 SST-2 examples: seconds a run)."""

from __future__ import annotations

import json

import pytest

from ghostify.device import fast_bf16
from ghostify.testing import tiny_checkpoint

from .conftest import benchmark_module


@pytest.mark.slow
def test_each_arm_counts_its_kernels_and_the_report_is_written_again(tmp_path, glue):
    if not fast_bf16():
        pytest.skip("bf16 products go through oneDNN only where the CPU has bf16 instructions")
    script = benchmark_module("kernel_cache")
    model = tiny_checkpoint(tmp_path / "model")
    work, out = tmp_path / "work", tmp_path / "kernels.md"
    common = ["--work", str(work), "--student", str(model), "--dataset", str(glue), "--samples", "64",
              "--max-length", "32", "--output", str(out)]
    script.main([*common, "--arms", "bf16:1024,no:8192", "--rounds", "1"])
    rows = [json.loads(line) for line in (work / "rows.jsonl").read_text().splitlines()]
    assert [r["arm"] for r in rows] == ["bf16:1024", "no:8192"]
    made = {r["arm"]: r["primitives_made"] for r in rows}
    assert made["bf16:1024"] > made["no:8192"]  # bf16 products are oneDNN's; float32 ones torch's BLAS
    assert not any(work.glob("run-*"))  # each run's checkpoint removed after its row
    first = out.read_text()
    # a second round: the first round's rows are kept, not run again; then the report from the rows alone
    script.main([*common, "--arms", "bf16:1024,no:8192", "--rounds", "2"])
    assert len((work / "rows.jsonl").read_text().splitlines()) == 4
    script.main([*common, "--arms", "bf16:1024,no:8192", "--rounds", "2", "--report-only"])
    table = [line for line in out.read_text().splitlines() if line.startswith("| bf16:1024 |")]
    assert len(table) == 1 and table[0].count(",") >= 2  # both rounds' cells
    assert first.splitlines()[0] == out.read_text().splitlines()[0]
