"""The registry of structural methods: one list, its restore order, its order rules checked for a
whole recipe before anything runs (with the file and line) and by every command."""

from __future__ import annotations

from dataclasses import replace

import pytest

import ghostify.methods as methods
from ghostify import load_model
from ghostify import recipe as recipes
from ghostify.errors import GhostifyError
from ghostify.methods import BY_NAME, METHODS, check_order, stage_methods
from ghostify.recipe import RecipeError
from ghostify.record import GhostifyRecord
from ghostify.steps import attach_ghost, factorize_embeddings, group_linear, prune, share_layers
from ghostify.testing import tiny_checkpoint


def test_the_registry_lists_every_method_once_in_restore_order():
    assert [m.name for m in METHODS] == ["sharing", "dropped_layers", "hidden", "pruning", "grouped", "ghost", "embeddings",
                                        "references"]
    for method in METHODS:  # every rule names a method that comes later in the restore order
        assert all(METHODS.index(BY_NAME[later]) > METHODS.index(method) for later in method.before)


def test_load_model_restores_through_the_registry_in_its_order(tmp_path, monkeypatch):
    tiny_checkpoint(tmp_path / "m", num_hidden_layers=4)
    share_layers(tmp_path / "m", tmp_path / "s", groups=2)
    prune(tmp_path / "s", tmp_path / "p", width=0.5)
    group_linear(tmp_path / "p", tmp_path / "g", groups=2, modules="qkv")
    attach_ghost(tmp_path / "g", tmp_path / "gh")
    factorize_embeddings(tmp_path / "gh", tmp_path / "f", rank=8)
    calls = []

    def spy(method):
        def restore(model, adapter, record, source):
            calls.append(method.name)
            method.restore(model, adapter, record, source)
        return replace(method, restore=restore)

    monkeypatch.setattr(methods.base, "REGISTRY", [spy(m) for m in METHODS])
    load_model(tmp_path / "f")
    assert calls == [m.name for m in METHODS]


def test_stages_map_to_methods():
    assert [m.name for m in stage_methods("attach-ghost", {})] == ["ghost"]
    assert stage_methods("distill", {}) == [] and [m.name for m in stage_methods("distill", {"references": True})] == ["references"]
    assert stage_methods("finetune", {"references": True}) == []


RECIPE_HEAD = """model: {model}
data: {{dataset: toy, text_columns: [sentence], label_column: label}}
stages:
"""


@pytest.mark.parametrize("stages, line, message", [
    (["attach-ghost: {}", "prune: {width: 0.5}"], 5, "prune before attach-ghost"),
    (["attach-ghost: {}", "group-linear: {groups: 2}"], 5, "group-linear before attach-ghost"),
    (["group-linear: {groups: 2}", "prune: {width: 0.5}"], 5, "prune before group-linear"),
    (["attach-ghost: {}", "share-layers: {groups: 1}"], 5, "share-layers before attach-ghost"),
    (["distill: {teacher: x, references: true}", "share-layers: {groups: 1}"], 5, "share-layers before distill --references"),
    (["attach-ghost: {}", "finetune: {}", "attach-ghost: {output: again}"], 6, "already has ghost modules"),
])
def test_a_recipe_in_the_wrong_order_fails_before_anything_runs(tmp_path, stages, line, message):
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE_HEAD.format(model="some/model") + "".join(f"  - {s}\n" for s in stages))
    with pytest.raises(RecipeError) as info:
        recipes.load(path)
    problems = [p for p in info.value.problems if message in p]
    assert problems, info.value.problems
    assert problems[0].startswith(f"{path}:{line}:"), problems[0]


def test_a_recipe_sees_what_its_local_model_already_has(tmp_path):
    tiny_checkpoint(tmp_path / "m")
    attach_ghost(tmp_path / "m", tmp_path / "ghosted")
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE_HEAD.format(model=tmp_path / "ghosted") + "  - prune: {width: 0.5}\n")
    with pytest.raises(RecipeError, match=f"the model {tmp_path / 'ghosted'} has ghost modules"):
        recipes.load(path)
    path.write_text(RECIPE_HEAD.format(model=tmp_path / "ghosted") + "  - factorize-embeddings: {rank: 8}\n")
    assert recipes.load(path).stages  # no rule against it


def test_every_command_checks_the_order_against_the_record():
    record = GhostifyRecord.dense(2, 4, 37)
    check_order("pruning", record)  # a dense model: anything goes
    record.methods["ghost"] = {"format": 1}
    for name, message in (("pruning", "prune before attach-ghost"), ("grouped", "group-linear before attach-ghost"),
                          ("sharing", "share-layers before attach-ghost"), ("ghost", "already has ghost modules")):
        with pytest.raises(GhostifyError, match=message):
            check_order(name, record)
    check_order("embeddings", record)
    check_order("references", record)


def test_each_method_step_is_made_once():
    """A recipe's validation asks for every method's step at every stage it checks: each is made once (a method
    registered later gets its own when first asked: test_record_format's late registration)."""
    from ghostify import steps

    made = steps.method_steps()
    assert made["prune"] is steps.method_steps()["prune"] is steps.prune is prune
    assert set(made) >= {"prune", "attach-ghost", "drop-layers", "share-layers"}
    assert "width" in made["prune"].__signature__.parameters
