"""benchmarks/latency_fit.py: the latency model's probes and the given shapes timed in one run, each shape's
speed-up measured and predicted both ways (a tiny checkpoint in PyTorch: seconds)."""

from __future__ import annotations

import pytest

from ghostify.testing import tiny_checkpoint

from .conftest import benchmark_module


@pytest.mark.slow  # a benchmark script's own check: the full run (it times 13 models)
def test_shapes_are_timed_and_predicted_beside_the_probes(tmp_path):
    script = benchmark_module("latency_fit")
    model = tiny_checkpoint(tmp_path / "model")
    out = tmp_path / "fit.md"
    script.main([str(model), "--runtime", "pytorch", "--rounds", "3", "--warmup", "1", "--seq-len", "16",
                 "--shapes", "1x1x8;2x2,1x16,8", "--output", str(out)])
    text = out.read_text()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and "layers," in line]
    assert [row[0] for row in rows] == ["| 1 layers, 1 heads, 8 neurons", "| 2 layers, 2,1 heads, 16,8 neurons"]
    for row in rows:  # measured and both predictions are speed-ups (the dense model over the shape)
        assert all(float(cell.rstrip(" |x")) > 0 for cell in row[3:6]), row
    assert "Speed-ups of the 2 `--shapes` over the fitted dense time" in text
    assert "Speed-ups of the 2 `--shapes` over the measured dense time" in text


def test_a_malformed_shape_is_refused_in_one_line():
    script = benchmark_module("latency_fit")
    with pytest.raises(SystemExit, match="is not LAYERSxHEADSxNEURONS"):
        script.parse_shapes("4x2")
    with pytest.raises(SystemExit, match="neither 1 nor 3"):
        script.parse_shapes("3x1,2x8")
