"""benchmarks/budget_curve.py's paired section: each arm against ``today`` over the seeds both ran, by hand."""

from __future__ import annotations

from .conftest import benchmark_module


def _row(arm: str, seed: int, accuracy: float, speedup: float, budget: str = "20m") -> dict:
    return {"task": "sst2", "target": 6.0, "arm": arm, "budget": budget, "seed": seed,
            "shipped_metrics": {"accuracy": accuracy}, "metrics": {"accuracy": 0.0}, "measured_speedup": speedup}


def test_arms_are_paired_with_today_by_seed_with_a_student_t_interval():
    script = benchmark_module("budget_curve")
    today = [_row("today", s, a, 6.0, "standard") for s, a in ((0, 0.80), (1, 0.82), (2, 0.82))]
    # differences +4, +1, +1 points: mean 2, standard deviation sqrt(3), so the half-width is t(0.975, 2) = 4.303
    auto = [_row("auto", s, a, x) for s, a, x in ((0, 0.84, 5.0), (1, 0.83, 6.0), (2, 0.83, 7.0), (3, 0.9, 6.0))]
    lone = [_row("fp32", 0, 0.85, 6.0)]  # one seed in common with today: no interval, no line
    lines = script._paired("sst2", today + auto + lone)
    pairs = [line for line in lines if line.startswith("- ")]
    assert pairs == ["- 6x, auto (20m) against today (standard), seeds 0, 1, 2: +2.0 points (95% interval -2.3 to "
                     "+6.3; per seed +4.0, +1.0, +1.0), at 6.00x against 6.00x"]
    assert script._paired("sst2", today) == []
