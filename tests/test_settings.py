"""Settings dataclasses: one declaration per option, seen alike by the CLI, recipes and Python."""

from __future__ import annotations

import dataclasses

import click
import pytest
import typer.main

from ghostify import steps
from ghostify.cli.app import app
from ghostify.errors import GhostifyError
from ghostify.flatten import flat_parameters, pack, setting_fields
from ghostify.heads import classifier_labels
from ghostify.recipe.schema import STAGE_MODELS
from ghostify.settings import DataSettings, DistillWeights, FinetuneWeights, StudentSettings, TrainSettings
from ghostify.testing import tiny_config


def _cli_options(name: str) -> dict[str, click.Parameter]:
    from ghostify.cli import commands  # noqa: F401  (registers the commands)

    command = typer.main.get_command(app).commands[name]
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("command", ["finetune", "distill", "eval"])
def test_every_setting_is_a_flag_and_a_recipe_key_with_the_fields_default(command):
    options = _cli_options(command)
    keys = STAGE_MODELS[command].model_fields
    function = {"eval": steps.evaluate}.get(command) or getattr(steps, command)
    for parameter in flat_parameters(function):
        if parameter.group is None:
            continue
        flag = options[parameter.name]
        assert flag.opts == [f"--{parameter.name.replace('_', '-')}"]
        assert flag.default == parameter.default
        if parameter.name != "seed":  # a stage without one takes the recipe's
            assert keys[parameter.name].default == parameter.default


def test_internal_fields_are_neither_flags_nor_keys():
    assert "log_steps" not in {f.name for f in setting_fields(TrainSettings)}
    assert "log_steps" not in STAGE_MODELS["finetune"].model_fields and "log_steps" not in _cli_options("finetune")


def test_flat_keywords_are_packed_into_the_settings_over_a_given_instance():
    packed = pack(steps.distill, {"teacher": "t", "task": "sst2", "epochs": 1, "logit_weight": 1.0,
                                  "training": TrainSettings(learning_rate=1e-3)})
    assert packed["teacher"] == "t" and packed["data"] == DataSettings(task="sst2")
    assert packed["training"] == TrainSettings(epochs=1, learning_rate=1e-3)
    assert packed["losses"] == DistillWeights(logit_weight=1.0) and "student_settings" not in packed
    with pytest.raises(TypeError):
        steps.finetune("m", "out", no_such_setting=1)


@pytest.mark.parametrize(("settings", "message"), [
    (TrainSettings(epochs=0), "--epochs"),
    (TrainSettings(weight_decay=-1.0), "--weight-decay"),
    (DataSettings(max_samples=0), "--max-samples"),
    (StudentSettings(dropout=1.0), "--dropout"),
    (StudentSettings(train="some"), "--train"),
    (FinetuneWeights(teacher_weight=2.0), "--teacher-weight"),
    (DistillWeights(emb_weight=0.0, mha_weight=0.0, ffn_weight=0.0), "every distillation loss weight is 0"),
])
def test_each_settings_class_validates_its_fields(settings, message):
    with pytest.raises(GhostifyError, match=message):
        settings.validate()
    dataclasses.replace(settings)  # frozen, but replaceable


def test_the_head_check():
    config = tiny_config("bert", num_labels=3)
    config.architectures = ["BertForSequenceClassification"]
    assert classifier_labels(config) == 3
    config.architectures = ["BertForMaskedLM"]
    assert classifier_labels(config) is None
