"""Issue 24, the report: every evaluated model of a run on accuracy against FLOPs (the teacher,
each stage with a metric, the final model in PyTorch, ONNX int8 as its own point) and against
latency when `ghostify bench` results are in the run directory; a stage no better than a constant
prediction is marked; `bench` never cuts a model's name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.figure
import pytest

from ghostify.recipe.report import NO_BETTER, markdown, plot, read_report, run_points
from ghostify.steps import bench
from ghostify.steps.bench import short_names

from .conftest import run_cli
from .test_scores_only import quick_run  # noqa: F401  (the quickstart run on a tiny model)


@pytest.fixture
def figures(monkeypatch):
    """What plot() draws: the title, the panels' x labels and the legend texts of each saved figure."""
    saved = []
    original = matplotlib.figure.Figure.savefig

    def record(self, *args, **kwargs):
        legends = [t.get_text() for ax in self.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        saved.append({"title": self._suptitle.get_text() if self._suptitle else "",
                      "xlabels": [ax.get_xlabel() for ax in self.axes], "legend": legends})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return saved


def test_report_plots_teacher_stages_and_final_in_each_runtime(quick_run, figures, tmp_path):  # noqa: F811
    report = read_report(quick_run)
    points = {p.label: p for p in run_points(str(quick_run), report, "accuracy")}
    assert points["01-teacher"].kind == "teacher"
    assert points["06-final"].kind == "stage"  # a training stage's own validation
    final, int8 = points["07-eval"], points["09-eval-int8"]
    assert final.kind == "final" and int8.kind == "onnx (int8)"
    stage = {row["stage"]: row for row in report["stages"]}
    assert int8.flops == final.flops == stage["06-final"]["flops"]  # the same graph: the same FLOPs
    assert points["01-teacher"].flops > final.flops  # pruned to half width
    assert all(p.latency_ms is None for p in points.values())
    plot([(str(quick_run), report)], tmp_path / "one.png")
    (drawn,) = figures
    assert str(quick_run) in drawn["title"] and "accuracy" in drawn["title"]
    assert len(drawn["xlabels"]) == 1 and "FLOPs" in drawn["xlabels"][0]
    assert {"teacher", "stage", "final (PyTorch)", "final (ONNX int8)"} <= set(drawn["legend"])


def test_bench_results_in_the_run_dir_add_a_latency_panel(quick_run, figures, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    shutil.copytree(quick_run, run, symlinks=True)
    rows = bench([run / "06-final", run / "08-onnx" / "model_int8.onnx"], rounds=2, warmup=0, seq_len=16)
    (run / "bench.json").write_text(json.dumps(rows))
    points = {p.label: p for p in run_points(str(run), read_report(run), "accuracy")}
    assert points["07-eval"].latency_ms == rows[0]["median_ms"]
    assert points["09-eval-int8"].latency_ms == rows[1]["median_ms"]
    assert points["01-teacher"].latency_ms is None
    plot([(str(run), read_report(run))], tmp_path / "two.png")
    assert [("FLOPs" in x, "latency" in x) for x in figures[0]["xlabels"]] == [(True, False), (False, True)]


def test_a_stage_no_better_than_a_constant_is_marked(quick_run, figures, tmp_path):  # noqa: F811
    report = read_report(quick_run)
    # the tiny teacher learns nothing in 2 steps: the run's own report.md says so
    assert report["stages"][0]["constant_baseline"]["beats"] is False
    assert "01-teacher (!)" in (quick_run / "report.md").read_text()
    report["stages"][0]["constant_baseline"] = {"metric": "accuracy", "value": 0.55, "best": 0.5, "beats": False}
    report["stages"][4]["constant_baseline"] = {"metric": "accuracy", "value": 0.55, "best": 0.9, "beats": True}
    text = markdown([("runs/x", report)])
    assert report["stages"][4]["stage"] == "06-final"
    assert "01-teacher (!)" in text and NO_BETTER in text and "06-final (!)" not in text
    plot([("runs/x", report)], tmp_path / "p.png")
    assert NO_BETTER in figures[0]["legend"]


def test_bench_names_tell_apart_the_exports_of_one_run(quick_run, capsys):  # noqa: F811
    deep = str(quick_run / ("x" * 60))  # longer than a terminal is wide
    assert short_names([f"{deep}/08-onnx/model.onnx", f"{deep}/08-onnx/model_int8.onnx", f"{deep}/06-final"]) == \
        ["model.onnx", "model_int8.onnx", "06-final"]
    assert short_names(["a/final", "b/final"]) == ["a/final", "b/final"]
    models = [quick_run / "08-onnx", quick_run / "08-onnx" / "model_int8.onnx"]
    code, out, err = run_cli(capsys, "bench", *models, "--rounds", "1", "--warmup", "0", "--seq-len", "8")
    assert code == 0, err
    assert f"1: {models[0]}" in out and f"2: {models[1]}" in out and "…" not in out
