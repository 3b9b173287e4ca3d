"""What a task kind changes in ``compress``: the scoring a time budget sizes in tokens, and the distillation's
losses (the kind's ``compress_distill``)."""

from __future__ import annotations

import dataclasses

import pytest

from ghostify.latency_model import Deployment
from ghostify.recipe.compress_settings import SCORED_TOKENS, CompressSettings, Step, scored, sized_in_tokens
from ghostify.settings import BUDGETS, DataSettings, TaskSettings
from ghostify.steps.training_common import task_kind


def test_scoring_counts_are_sized_in_tokens_by_hand():
    assert SCORED_TOKENS == 128
    assert scored(1024, 256) == 512 and scored(2048, 256) == 1024
    assert scored(512, 384) == 170  # 512 * 128 // 384
    assert scored(3, 4096) == 1  # never none
    assert scored(0, 256) == 0  # no mask tuning stays none
    assert scored(1024, 128) == 1024 and scored(1024, 64) == 1024 and scored(1024, None) == 1024
    budget = BUDGETS["standard"]
    assert sized_in_tokens(budget, None) == budget and sized_in_tokens(budget, 128) == budget
    sized = sized_in_tokens(budget, 256)
    assert (sized.importance_samples, sized.tune_masks) == (512, 1024)
    assert (sized.max_samples, sized.epochs) == (budget.max_samples, budget.epochs)


def _settings(budget: str, max_length: int, task: str = "squad", **extra) -> CompressSettings:
    return CompressSettings(model="m", speedup=3, budget=budget,
                            data=DataSettings(task=task, dataset="d", max_length=max_length), **extra)


def test_a_time_budget_scores_question_windows_in_tokens_and_a_named_budget_as_named():
    timed = _settings("20m", 256).chosen
    assert (timed.importance_samples, timed.tune_masks) == (512, 1024)
    assert (_settings("20m", 384).chosen.importance_samples, _settings("20m", 384).chosen.tune_masks) == (341, 682)
    short = _settings("20m", 128).chosen
    assert (short.importance_samples, short.tune_masks) == (1024, 2048)
    # sentences are as long as their text, whatever --max-length allows
    sentences = _settings("20m", 256, task="sst2").chosen
    assert (sentences.importance_samples, sentences.tune_masks) == (1024, 2048)
    # at QA's own learning rates (the others keep the budget's)
    assert (timed.distill_learning_rate, timed.finetune_learning_rate) == (5e-4, 5e-4)
    assert (sentences.distill_learning_rate, sentences.finetune_learning_rate) == (2e-4, 1e-4)
    # quick and standard stay as they were, for comparison
    assert _settings("standard", 256).chosen == BUDGETS["standard"]
    # the user's own count is theirs
    assert _settings("20m", 256, importance_samples=300).chosen.importance_samples == 300


@pytest.mark.parametrize(("task", "expected"), [
    ("sst2", {}),
    ("conll2003", {}),
    ("squad", {"emb_weight": 0.0, "mha_weight": 0.0, "ffn_weight": 0.0, "logit_weight": 1.0}),
    ("embeddings", {"logit_weight": 1.0}),
])
def test_each_kind_distils_with_its_own_losses(task, expected):
    """QA compares the start and end distributions alone (a window's hidden states overflow the teacher store);
    the embeddings task adds its pooled embedding to the hidden states; the others distil the hidden states."""
    data = DataSettings(task=task, dataset="d", **({"text_columns": ("sentence",)} if task == "embeddings" else {}))
    weights = task_kind(data, TaskSettings()).compress_distill
    assert weights == expected
    settings = CompressSettings(model="m", speedup=2, budget="quick", data=data, teacher="t",
                                deployment=Deployment(runtime="onnx-int8"))  # compress resolves its default, auto, first
    assert settings.distill_weights == expected and settings.embeddings == (task == "embeddings")
    recipe = settings.recipe([Step(2.0)])
    (distill,) = [s for s in recipe.stages if s.command.name == "distill"]
    defaults = {"emb_weight": 1.0, "mha_weight": 1.0, "ffn_weight": 1.0, "logit_weight": 0.0}
    for name, value in (defaults | expected).items():
        assert distill.settings.get(name, defaults[name]) == value, (name, distill.settings)


def test_the_candidates_are_compared_on_as_many_tokens():
    assert _settings("20m", 256).compare_samples == 256
    assert _settings("standard", 256).compare_samples == 512
    assert _settings("20m", 256, task="sst2").compare_samples == 512


def test_a_time_budget_distils_question_answering_on_masked_copies_too():
    """QA's time budget reads one masked copy of every training text (the kind's ``compress_timed``); the other
    kinds and the named budgets none; the user's count is theirs; the distillation stage says so."""
    assert _settings("20m", 256).chosen.masked_copies == 1
    assert _settings("20m", 256, task="sst2").chosen.masked_copies == 0
    assert _settings("standard", 256).chosen.masked_copies == 0
    assert _settings("20m", 256, masked_copies=0).chosen.masked_copies == 0
    assert _settings("quick", 256, task="sst2", masked_copies=2).chosen.masked_copies == 2
    for settings, copies in ((_settings("20m", 256, teacher="t"), 1), (_settings("quick", 256, teacher="t"), None)):
        recipe = dataclasses.replace(settings, deployment=Deployment(runtime="onnx-int8")).recipe([Step(3.0)])
        (distill,) = [s for s in recipe.stages if s.command.name == "distill"]
        assert distill.settings.get("masked_copies") == copies
