"""benchmarks/tasks_quality.py: every recipe it writes (the plain chain and each lever, for each dataset it
applies to) is a valid ghostify recipe whose stages carry the lever's settings, and macro-F1 by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .conftest import benchmark_module


@pytest.fixture(scope="module")
def tq():
    return benchmark_module("tasks_quality")


def _validated(raw: dict, path: Path):
    from ghostify import recipe as recipes

    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return recipes.load(path)


def _stage(recipe, name: str) -> dict:
    return next(s.settings for s in recipe.stages if s.command.name == name)


@pytest.mark.parametrize("dataset", ["conll2003", "squad", "bbc_news", "prompt_injection"])
def test_every_lever_writes_a_valid_recipe_with_its_settings(tq, tmp_path, dataset):
    args = tq.parse_args(["--work", str(tmp_path)])
    spec, budget = tq.DATASETS[dataset], tq.BUDGETS[dataset]
    plain = _validated(tq.chain_recipe(args, dataset, spec, budget, tmp_path / "data", "6/12", tmp_path / "t"),
                       tmp_path / "plain.yaml")
    assert _stage(plain, "distill")["epochs"] == budget.distill_epochs
    for name, lever in tq.LEVERS.items():
        if spec.kind not in lever.kinds:
            continue
        if lever.export_only:
            raw = tq.export_recipe(args, dataset, spec, budget, tmp_path / "data", tmp_path / "final", lever)
            assert [next(iter(s)) for s in raw["stages"]] == ["eval", "export", "eval", "eval"]
        else:
            raw = tq.chain_recipe(args, dataset, spec, budget, tmp_path / "data", "6/12", tmp_path / "t", lever)
        recipe = _validated(raw, tmp_path / f"{name}.yaml")
        export = _stage(recipe, "export")
        if name.startswith("fp32-"):
            assert "task-head" in export["keep_fp32"]
        if name == "distill-epochs-x2":
            assert _stage(recipe, "distill")["epochs"] == 2 * budget.distill_epochs
        if name == "global":
            assert _stage(recipe, "prune")["allocation"] == "global"
        if name == "label-all-subwords":
            assert recipe.header.data.label_all_subwords is True


def test_unknown_lever_is_refused(tq, tmp_path):
    with pytest.raises(SystemExit):
        tq.parse_args(["--work", str(tmp_path), "--levers", "fp32-everything"])


def test_macro_f1_by_hand(tq):
    # class 0: tp 1 fp 1 fn 0 -> 2/3; class 1: tp 1 fp 0 fn 1 -> 2/3
    assert tq.macro_f1([0, 0, 1], [0, 1, 1]) == pytest.approx(2 / 3)
    # a class only predicted counts with F1 0
    assert tq.macro_f1([2, 1], [1, 1]) == pytest.approx((0 + 2 / 3) / 2)
