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


@pytest.fixture
def drawn_figures(monkeypatch):
    """Each saved figure, with the pairs of its texts that overlap as drawn (``overlapping``)."""
    saved = []
    original = matplotlib.figure.Figure.savefig

    def record(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        self.overlapping = _overlapping(self)  # measured while the figure still has its renderer
        saved.append(self)
        return result

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return saved


def _overlapping(figure) -> list[tuple[str, str]]:
    renderer = figure.canvas.get_renderer()
    texts = [t for ax in figure.axes for t in ax.texts if t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:] if box.overlaps(other)]


def test_the_report_plot_names_each_place_once_and_no_label_covers_another(quick_run, drawn_figures, tmp_path):  # noqa: F811
    """Issue 39: "06-final" was printed over "07-eval" (the final eval of a stage is at the stage's own point)."""
    plot([(str(quick_run), read_report(quick_run))], tmp_path / "one.png")
    (figure,) = drawn_figures
    named = [stage for ax in figure.axes for t in ax.texts for stage in t.get_text().split(", ")]
    assert any(t.get_text().startswith("06-final, 07-eval") for t in figure.axes[0].texts)
    assert len(named) == len(set(named)) and "01-teacher" in named  # each stage named once
    assert figure.overlapping == []
    assert "`" not in figure.axes[0].get_xlabel()


def test_the_speedup_figure_has_a_legend_the_original_sizes_and_whole_numbers(drawn_figures, tmp_path):
    """Issue 39: no legend for the blue and orange bars, a heads axis ticked 0.0-1.0 for a count of 1, the
    original 12 heads and 1,536 neurons not shown."""
    from ghostify.recipe.compress_report import plot

    report = {"heads_per_layer": [12, 6, 1], "neurons_per_layer": [1536, 800, 144], "layers": [0, 2, 3], "layers_of": 4,
              "heads_of": 12, "neurons_of": 1536, "target_speedup": 2.0, "measured_speedup": 2.04,
              "measured_range": [1.9, 2.1], "deployment": {"runtime": "onnx-int8", "batch_size": 1, "seq_len": 128, "threads": 1},
              "allocations": [{"measured": 1.71, "predicted": 2.0, "measured_low": 1.6, "measured_high": 1.8},
                              {"measured": 1.97, "predicted": 2.3, "measured_low": 1.9, "measured_high": 2.0}]}
    plot(tmp_path / "speedup.png", report)
    (figure,) = drawn_figures
    left, right = figure.axes
    legends = [t.get_text() for ax in (left, right) for t in ax.get_legend().get_texts()]
    assert {"heads (of 12)", "FFN neurons (of 1,536)", "target 2x", "pruned model", "shipped model"} <= set(legends)
    assert [int(t) for t in left.get_xticks()] == [0, 1, 2, 3]  # every original layer, the dropped one too
    texts = [t.get_text() for t in left.texts]
    assert "dropped" in texts and {"12", "1", "1,536", "144"} <= texts_on_bars(left)
    assert max(left.get_yticks()) == 100 and "% of the original" in left.get_ylabel()
    assert [t.get_text() for t in right.get_xticklabels()][-1] == "shipped"
    assert figure.overlapping == []
    assert (tmp_path / "speedup.png").stat().st_size > 0


def texts_on_bars(ax) -> set[str]:
    """The labels bar_label wrote (annotations on the bars)."""
    return {t.get_text() for t in ax.texts}
