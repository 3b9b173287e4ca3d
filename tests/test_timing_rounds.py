"""benchmarks/timing_rounds.py: each round count's checks are read both ways, and a model against itself measures
about 1x, alone and with another model taking turns (a tiny checkpoint in PyTorch: seconds)."""

from __future__ import annotations

from ghostify.testing import tiny_checkpoint

from .conftest import benchmark_module


def test_a_model_against_itself_measures_one_at_every_round_count(tmp_path):
    script = benchmark_module("timing_rounds")
    model = tiny_checkpoint(tmp_path / "model")
    out = tmp_path / "rounds.md"
    script.main(["--dense", str(model), "--compressed", str(model), "--rounds", "3", "9", "--repeats", "2",
                 "--seq-len", "16", "--warmup", "1", "--others", str(model), "--output", str(out)])
    rows = [line.split(" | ") for line in out.read_text().splitlines() if line.startswith(("| alone |", "| with"))]
    assert [row[:2] for row in rows] == [["| alone", "3"], ["| alone", "9"], ["| with the others", "3"],
                                         ["| with the others", "9"]]
    for row in rows:  # the same model both sides: each estimate near 1x
        for cell in row[2:4]:
            assert 0.5 < float(cell.split("x")[0]) < 2.0, cell
