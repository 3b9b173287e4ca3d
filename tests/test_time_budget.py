"""A budget stated in time: the durations it reads and the counts it plans, against hand-computed values."""

from __future__ import annotations

import dataclasses

import pytest

from ghostify.errors import GhostifyError
from ghostify.steps.throughput import fastest_precisions
from ghostify.recipe.time_budget import (FINETUNE_SHARE, MAX_EPOCHS, StageCounts, Throughput, TrainingPlan,
                                         distillation_pace, finetune_counts, finetune_with_evaluations, labelled_seen,
                                         parse_duration, plan_training, stage_overhead, stages_worth_it)

RATES = Throughput(teacher=0.01, distill=0.02, finetune=0.015, evaluate=0.005)


@pytest.mark.parametrize("text, seconds", [("20m", 1200), ("1h", 3600), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400),
                                           ("20 min", 1200), ("2hr", 7200), ("45sec", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["quick", "standard", "20", "m", "runs/c/budget.json", "20m of it", ""])
def test_other_budgets_are_not_durations(text):
    assert parse_duration(text) is None


def test_no_time_is_refused():
    with pytest.raises(GhostifyError, match="no time at all"):
        parse_duration("0m")


def test_a_large_task_reads_a_subset_once_and_later_stages_reuse_the_teachers_outputs():
    # 1200 s: the fine-tune gets 300 s (20,000 x 0.015), each of 2 distillation stages 450 s.
    # Stage 1: 450 / (0.02 + 0.01) = 15,000 texts. Stage 2: 15,000 texts seen cost 0.02, the rest 0.03:
    # 15,000 x 0.02 = 300 s, 150 s left / 0.03 = 5,000 more: 20,000.
    plan = plan_training(1200, texts=67000, labelled=67000, throughput=RATES, stages=2)
    assert plan.distill == (StageCounts(15000, 1), StageCounts(20000, 1))
    assert plan.finetune == StageCounts(20000, 1)
    assert plan.seconds == pytest.approx({"distill 1": 450, "distill 2": 450, "finetune": 300})
    assert FINETUNE_SHARE == 0.25


def test_the_fine_tune_pays_the_teachers_pass_for_examples_distillation_did_not_read():
    # 300 s: the 10,000 examples distillation read cost 0.015 each (150 s), the rest 0.015 + 0.01 (the teacher):
    # 150 s / 0.025 = 6,000 more: 16,000 (the plan before gave it 20,000, which ran 100 s over)
    assert finetune_counts(300, 67000, RATES, seen=10000) == (StageCounts(16000, 1), pytest.approx(300))
    assert finetune_counts(300, 67000, RATES) == (StageCounts(20000, 1), pytest.approx(300))  # every one read


def test_the_fine_tune_counts_only_the_labelled_share_of_what_distillation_read():
    """With --unlabelled texts mixed in (a seeded subset of both), 10,000 of 20,000 texts read hold about 7,500 of
    the 15,000 labelled examples; all of them once every text was read; without unlabelled texts, as many as read."""
    assert labelled_seen(10_000, 20_000, 15_000) == 7_500
    assert labelled_seen(20_000, 20_000, 15_000) == 15_000
    assert labelled_seen(3_000, 5_000, 5_000) == 3_000
    # the plan: 1,200 s, distillation 900 s at 0.03 s a new text reads 30,000 of 40,000 texts (20,000 labelled):
    # 15,000 of the labelled examples stored; the fine-tune's 300 s: 15,000 x 0.015 = 225 s, 75 s / 0.025 = 3,000 more
    plan = plan_training(1200, texts=40_000, labelled=20_000, throughput=RATES, stages=1)
    assert plan.distill == (StageCounts(30_000, 1),)
    assert plan.finetune == StageCounts(18_000, 1)


def test_a_small_task_is_read_whole_for_as_many_epochs_as_fit():
    # 900 s of distillation on 2,000 texts: the first epoch 2,000 x 0.03 = 60 s, each later one 40 s:
    # 60 + 40 (e - 1) <= 900 -> e = 22, capped at MAX_EPOCHS (20); fine-tune 300 s at 30 s an epoch: 10.
    plan = plan_training(1200, texts=2000, labelled=2000, throughput=RATES, stages=1)
    assert plan.distill == (StageCounts(None, MAX_EPOCHS),)
    assert plan.finetune == StageCounts(None, 10)
    assert plan.seconds["distill 1"] == pytest.approx(60 + 40 * (MAX_EPOCHS - 1))


def test_time_that_whole_epochs_leave_goes_to_part_of_one_more():
    """CoNLL-2003 at 3x with --budget 20m finished after 86% of it: 2 whole epochs fitted, 3 did not. Now the rest
    goes to the steps of one more epoch. 420 s: the fine-tune 105 s at 30 s an epoch (2,000 x 0.015) is 3 epochs
    (90 s) and 15 s / (32 x 0.015 s a step) = 31 steps of a fourth, 3 x 63 + 31 = 220 steps in all; distillation
    315 s: 60 s for the first epoch, 40 for each later one, 7 epochs in 300 s, 15 s / (32 x 0.02) = 23 steps more."""
    plan = plan_training(420, texts=2000, labelled=2000, throughput=RATES, stages=1)
    assert plan.distill == (StageCounts(None, 8, 7 * 63 + 23),)
    assert plan.finetune == StageCounts(None, 4, 3 * 63 + 31)
    assert plan.seconds == pytest.approx({"distill 1": 300 + 23 * 32 * 0.02, "finetune": 90 + 31 * 32 * 0.015})
    assert plan.finetune.examples(2000) == 3 * 2000 + 31 * 32
    assert plan.finetune.describe(2000) == "2,000 x 3 epochs and 31 of 63 steps of one more"
    assert StageCounts(None, 3).describe(2000) == "2,000 x 3 epochs"
    assert TrainingPlan.from_json(plan.to_json(), "budget.json") == plan
    # a stage without a cut epoch writes what a budget.json from before it had
    assert StageCounts(500, 1).to_json() == {"max_samples": 500, "epochs": 1}
    # one a deadline stopped at step 150 (2 epochs of 63 and 24 steps) trained 2 x 2,000 + 24 x 32 examples
    stopped = dataclasses.replace(plan.finetune, stop_step=150)
    assert stopped.examples(2000) == 2 * 2000 + 24 * 32
    assert stopped.describe(2000) == \
        "2,000 x 3 epochs and 31 of 63 steps of one more, stopped at step 150 by the deadline"
    written = dataclasses.replace(plan, finetune=stopped).to_json()
    assert TrainingPlan.from_json(written, "budget.json").finetune == stopped


def test_the_fine_tune_planned_after_distilling_leaves_time_for_its_evaluations_and_the_stages_start():
    """The SQuAD part's fine-tunes at 3x stopped at the deadline at 81% and 87% of their schedules: their plans had
    no room for the evaluation after each epoch. 105 s with 5 s an evaluation, 2,000 examples at 0.015 s (30 s an
    epoch, 0.48 s a step of 63): one evaluation reserved leaves 100 s, 3 epochs and 20 steps of a fourth (4
    evaluations); four reserved leave 85 s: 2 epochs (60 s) and 25 s / 0.48 = 52 steps of a third, whose three
    evaluations fit (60 + 52 x 0.48 + 15 = 99.96 s)."""
    counts, cost = finetune_with_evaluations(105, 2000, RATES, None, evaluation=5)
    assert counts == StageCounts(None, 3, 2 * 63 + 52)
    assert cost == pytest.approx(60 + 52 * 32 * 0.015)
    assert finetune_counts(100, 2000, RATES)[0] == StageCounts(None, 4, 3 * 63 + 20)  # one evaluation reserved
    assert finetune_with_evaluations(105, 2000, RATES, None, evaluation=0) == finetune_counts(105, 2000, RATES)
    # a time budget's fine-tune also evaluates before its first step: of 100 s, two evaluations leave 90 s, 3 epochs
    # (4 evaluations); those leave 80 s: 2 epochs and 20 s / 0.48 = 41 steps of a third (60 + 19.68 + 20 s)
    assert finetune_with_evaluations(100, 2000, RATES, None, evaluation=5, evaluate_first=True)[0] == \
        StageCounts(None, 3, 2 * 63 + 41)
    # the stage's own start and saving: the distillation's time less its epochs' and its evaluations'
    assert stage_overhead(640.0, 609.0, 3, 9.0) == pytest.approx(4.0)
    assert stage_overhead(600.0, 620.0, 1, 5.0) == 0.0  # never below nothing (the clocks differ a little)


def test_too_little_time_for_a_stage_is_one_line():
    with pytest.raises(GhostifyError, match="s for distill 1: too little to take 8 optimizer steps"):
        plan_training(5, texts=67000, labelled=67000, throughput=RATES, stages=1)
    with pytest.raises(GhostifyError, match="larger --budget"):
        plan_training(-3, texts=10, labelled=10, throughput=RATES, stages=1)


def test_a_plan_reads_back_what_it_wrote_and_refuses_anything_else():
    plan = plan_training(1200, texts=67000, labelled=5000, throughput=RATES, stages=2)
    assert TrainingPlan.from_json(plan.to_json(), "budget.json") == plan
    # a run without a fine-tune (the embeddings task) writes none, and reads it back
    alone = dataclasses.replace(plan, finetune=None)
    assert TrainingPlan.from_json(alone.to_json(), "budget.json") == alone
    # the precisions a stage was timed in and trained in come back with it
    timed = dataclasses.replace(plan, finetune=plan.finetune.in_precisions({"student": "no", "teacher": "bf16"}))
    assert TrainingPlan.from_json(timed.to_json(), "budget.json") == timed
    assert timed.finetune.to_json()["teacher_precision"] == "bf16" and "mixed_precision" not in plan.finetune.to_json()
    for bad in ({}, {"distill": [], "finetune": {"max_samples": None, "epochs": 1}},
                {"distill": [{"max_samples": 5, "epochs": 1, "mixed_precision": "int8"}], "finetune": None},
                {"distill": [{"max_samples": 0, "epochs": 1}], "finetune": {"max_samples": None, "epochs": 1}},
                {"distill": [{"max_samples": 5, "epochs": True}], "finetune": {"max_samples": None, "epochs": 1}},
                {"distill": [{"max_samples": 5, "epochs": 2, "max_steps": 0}],
                 "finetune": {"max_samples": None, "epochs": 1}},
                {"distill": [{"max_samples": 5, "epochs": 2}], "finetune": {"max_samples": None, "epochs": 1,
                                                                            "stop_step": "8"}}):
        with pytest.raises(GhostifyError, match="budget.json"):
            TrainingPlan.from_json(bad, "budget.json")


def test_the_last_stage_must_end_when_what_follows_it_still_fits_in_the_budget():
    """60 s, 10 spent: the last stage's deadline leaves its closing evaluation (5 s) and the run's end (two more
    evaluations, 10 s, and half a later stage's set-up, none measured yet) before the budget's end: 35 s from now,
    and never before the fewest steps worth running."""
    import time

    from ghostify.recipe.compress import _Clock
    from ghostify.recipe.time_budget import MIN_STEPS

    clock = _Clock(60.0)
    clock.begin()
    clock.start -= 10
    before = time.time()
    deadline = clock.deadline(5.0)
    assert before + 35 - 0.5 <= deadline.at <= time.time() + 35 and deadline.least == MIN_STEPS


def test_a_later_stage_whose_time_is_spent_trains_the_fewest_steps_and_says_so():
    """Seen at 3x on STS-B with --budget 15m: the second stage's re-scoring and tuning took the time its distillation
    was planned to have, and the run stopped with a refusal after 15 minutes. A later stage now finishes the run
    with the fewest steps worth running (8 of 32), saying the budget is overrun; only the first stage refuses."""
    from ghostify.recipe.compress import _Clock

    sizes = {"texts": 1000, "labelled": 500, "validation": 50}
    clock = _Clock(60.0)
    clock.begin()
    clock.start -= 100  # 100 s spent of 60
    said: list[str] = []
    result = clock.plan_stage(2, 2, RATES, sizes, last=True, finetunes=True, say=said.append)
    assert result["counts"] == {"max_samples": 256, "epochs": 1}
    assert result["finetune"] == {"max_samples": 256, "epochs": 1}
    assert sum("fewest steps worth running" in line for line in said) == 2  # the distillation and the fine-tune
    first = _Clock(60.0)
    first.begin()
    first.start -= 100
    with pytest.raises(GhostifyError, match="too little to take 8 optimizer steps"):
        first.plan_stage(1, 2, RATES, sizes, last=False, finetunes=True, say=said.append)
    # where the run chose its two stages itself (predicted to fit), the first finishes as a later one does
    said.clear()
    result = first.plan_stage(1, 2, RATES, sizes, last=False, finetunes=True, say=said.append, refuse=False)
    assert result["counts"] == {"max_samples": 256, "epochs": 1}
    assert sum("fewest steps worth running" in line for line in said) == 1


def test_the_first_stage_reserves_its_own_overhead_for_each_later_stage():
    """A later stage re-scores, allocates and tunes again: the first stage plans as if each took half as long as its
    own allocation so far (it had reserved nothing, its own not yet recorded)."""
    from ghostify.recipe.compress import _Clock

    sizes = {"texts": 100_000, "labelled": 500, "validation": 0}
    plans = []
    for spent in (0.0, 300.0):
        clock = _Clock(1000.0)
        clock.begin()
        clock.stage_started = clock.start - spent
        clock.start -= spent
        plans.append(clock.plan_stage(1, 2, RATES, sizes, last=False, finetunes=True, say=lambda line: None))
    # 1000 s, nothing spent: (1000 - 250 for the fine-tune) / 2 = 375 s of distillation at 0.03 s per new text; 300 s
    # spent, half of it (150 s) reserved for stage 2 and 75 for the end: 475 left, (475 - 118.75) / 2 = 178.125 s
    assert [round(p["counts"]["max_samples"], -1) for p in plans] == [12_500, 5_940]


def test_a_stage_is_taken_where_its_distillation_gets_at_least_its_own_setting_up():
    """The SQuAD part at 3x: the teacher's evaluation (53 s) and scores (198 s with it) predict a first stage of
    100 + 2.75 x 198 = 644.5 s and a later one of half that, 322.25 s; with the end (53 + 161.125 s) 20 minutes
    leave 19.125 s to train, whose distillation share per stage (0.75 x 19.125 / 2) is far below 322.25: one stage.
    40 minutes leave 1,219.125 s, 457.2 s per stage: two."""
    assert stages_worth_it(1200, 2, scoring=198, evaluation=53) == 1
    assert stages_worth_it(2400, 2, scoring=198, evaluation=53) == 2
    # nothing to score: stages of 100 s and 50 s, the end 25 s; two need 0.75 x (s - 175) / 2 >= 50, s >= 308.33;
    # three 0.75 x (s - 225) / 3 >= 50, s >= 425
    assert [stages_worth_it(s, 2, scoring=0, evaluation=0) for s in (308, 309)] == [1, 2]
    assert [stages_worth_it(s, 3, scoring=0, evaluation=0) for s in (424, 425, 10_000)] == [2, 3, 3]
    assert stages_worth_it(10_000, 1, scoring=0, evaluation=0) == 1


def test_the_fine_tune_follows_the_distillations_pace_faster_as_well_as_slower():
    """On an NVIDIA H200 SST-2's 6x student distilled in 47 s of a planned 122 (the probe's ten steps an epoch cost
    about three times a long run's there); the fine-tune, held to the probe's rates, then planned 104 s and took 45,
    and the 4-minute run ended after 3.1. Its pace now scales the fine-tune's rates either way: 2,000 examples at
    0.015 s (30 s an epoch of 63 steps, 0.48 s a step) with 0.5 s evaluations in 40 s: two evaluations leave 39 s,
    1 epoch and 9 / 0.48 = 18 steps of a second; at half the pace (15 s an epoch, 0.24 s a step) three leave 38.5 s,
    2 epochs and 8.5 / 0.24 = 35 steps of a third."""
    assert distillation_pace(47.0, 122.0) == pytest.approx(0.385, abs=1e-3)
    assert distillation_pace(1030.0, 851.0) == pytest.approx(1.21, abs=1e-2)  # slower, as on the Xeon
    assert distillation_pace(5.0, 0.0) == distillation_pace(0.0, 10.0) == 1.0  # nothing planned or nothing timed
    rates = dataclasses.replace(RATES, evaluate=0.0)
    assert finetune_with_evaluations(40, 2000, rates, None, evaluation=0.5)[0] == StageCounts(None, 2, 63 + 18)
    assert finetune_with_evaluations(40, 2000, rates.slowed(0.5), None, evaluation=0.5)[0] == \
        StageCounts(None, 3, 2 * 63 + 35)


def test_the_store_is_kept_where_storing_and_reading_back_cost_less_than_the_teachers_pass():
    """The probe of SST-2's 6x first stage on a 2-core AMD EPYC, per 320 texts: a first visit 1.358 s over a later
    one (the teacher's pass and storing, less reading back), storing 0.249 s, reading 0.102 s: the pass is 1.211 s,
    more than 0.351 s: stored. A machine whose teacher runs fast (a pass of 0.04 s, storing 0.5, reading 0.2): not;
    without the store every visit pays the pass instead of reading back."""
    n = 320
    cpu = Throughput(teacher=1.358 / n, distill=2.18 / n, finetune=1.746 / n, evaluate=0.333 / n, storing=0.249 / n,
                     reading=0.102 / n)
    assert cpu.teacher_pass() * n == pytest.approx(1.211) and cpu.store_pays()
    fast = Throughput(teacher=(0.04 + 0.5 - 0.2) / n, distill=0.3 / n, finetune=0.1 / n, evaluate=0.01 / n,
                      storing=0.5 / n, reading=0.2 / n)
    assert fast.teacher_pass() * n == pytest.approx(0.04) and not fast.store_pays()
    plain = fast.without_store()
    assert plain.teacher == 0 and plain.storing == plain.reading == 0
    assert plain.distill * n == pytest.approx(0.3 - 0.2 + 0.04) and plain.finetune * n == pytest.approx(0.1 + 0.04)
    assert RATES.store_pays()  # a record from before the store timed itself: stored, as then


def test_the_teacher_and_the_student_each_run_in_the_precision_timed_faster():
    """The probes of SST-2's 6x second stage on a 2-core AMD EPYC with AVX-512 BF16 (ms a text): the teacher's pass
    3.91 in bf16 against 6.82 in float32 (57%): bf16; the student's distillation and fine-tuning steps 5.88 against
    5.21: float32. A first visit then costs the bf16 teacher's pass and the float32 student's step. bf16 within
    90% of float32's time (the first stage's student: 15.87 against 16.13) is not worth its rounding and memory:
    float32. A later stage keeps the first one's teacher (its stored outputs are keyed by it)."""
    ms = 1e-3
    bf16 = Throughput(teacher=(3.91 + 0.97 - 0.22) * ms, distill=3.25 * ms, finetune=2.63 * ms, evaluate=0.55 * ms,
                      storing=0.97 * ms, reading=0.22 * ms)
    fp32 = Throughput(teacher=(6.82 + 0.96 - 0.22) * ms, distill=2.71 * ms, finetune=2.50 * ms, evaluate=0.54 * ms,
                      storing=0.96 * ms, reading=0.22 * ms)
    rates, choice = fastest_precisions({"bf16": bf16, "no": fp32})
    assert (choice["teacher"], choice["student"]) == ("bf16", "no")
    assert choice["ms"]["bf16"] == {"teacher": pytest.approx(3.91), "student": pytest.approx(5.88)}
    assert rates.teacher_pass() == pytest.approx(3.91 * ms) and rates.distill == fp32.distill
    assert rates.finetune == fp32.finetune and rates.storing == bf16.storing
    # the first stage chose float32 for the teacher: a later stage keeps it, whatever its probe says
    later, kept = fastest_precisions({"bf16": bf16, "no": fp32}, teacher="no")
    assert kept["teacher"] == "no" and later.teacher == fp32.teacher
    # bf16 a little faster (the first stage's student, 15.87 against 16.13 ms): float32; clearly faster: bf16
    close = dataclasses.replace(fp32, distill=fp32.distill * 0.95, finetune=fp32.finetune * 0.95)
    assert fastest_precisions({"bf16": close, "no": fp32})[1]["student"] == "no"
    clear = dataclasses.replace(fp32, distill=fp32.distill * 0.85, finetune=fp32.finetune * 0.85)
    assert fastest_precisions({"bf16": clear, "no": fp32})[1]["student"] == "bf16"
