"""The engine's small state objects on their own: the plan of steps, where the loop is, and
when work falls due (the engine tests check them in training; these pin the edge cases)."""

from __future__ import annotations

import math

import pytest

from jiyu_magics.train.loop_position import LoopPosition
from jiyu_magics.train.step_cadence import StepCadence
from jiyu_magics.train.step_plan import StepPlan
from jiyu_magics.train.train_errors import TrainConfigError


def test_plan_rounds_accumulation_up_and_ends_at_whichever_comes_first():
    plan = StepPlan.of(range(10), epochs=3, max_steps=None, accum=4)
    assert (plan.steps_per_epoch, plan.epochs, plan.total_steps) == (3, 3, 9)
    assert [plan.group_size(b) for b in (0, 4, 8)] == [4, 4, 2], "the epoch's last group is short"
    assert StepPlan.of(range(10), epochs=3, max_steps=5, accum=1).total_steps == 5
    assert StepPlan.of(range(10), epochs=None, max_steps=25, accum=1).epochs is None


def test_plan_without_a_length_runs_until_max_steps():
    plan = StepPlan.of(iter(()), epochs=None, max_steps=7, accum=2)
    assert (plan.batches_per_epoch, plan.total_steps, plan.last_step) == (None, 7, 7)
    assert plan.group_size(5) == 2 and not plan.epoch_complete(10**6)
    assert StepPlan.of(iter(()), epochs=2, max_steps=None, accum=1).last_step == math.inf


def test_empty_data_is_refused():
    with pytest.raises(TrainConfigError, match="no batches"):
        StepPlan.of([], epochs=1, max_steps=None, accum=1)


def test_position_restores_the_samples_consumed_when_the_world_size_changes():
    position = LoopPosition()
    position.restore(
        {"step": 12, "epoch": 2, "batch_in_epoch": 6, "world_size": 2, "epoch_rng": ["e"], "rng": ["r"]}, world_size=4
    )
    assert (position.step, position.epoch, position.batch_in_epoch, position.last_ckpt_step) == (12, 2, 3, 12)
    position.start_step = 12
    position.step = 15
    position.next_epoch()
    assert (position.epoch, position.batch_in_epoch, position.last_step_epoch()) == (3, 0, 2)


def test_cadence_names_the_next_step_anything_is_due():
    cadence = StepCadence(step=0, last_step=100, log_every=10, log_interval_s=0.5, val_every=4, ckpt_every=6)
    assert cadence.next_due == 1
    cadence.passed(1)
    assert cadence.next_due == 4
    assert cadence.validation_due(4) and not cadence.checkpoint_due(4) and not cadence.log_due(4)
    cadence.passed(4)
    assert cadence.next_due == 6
    cadence.passed(9)
    assert cadence.next_due == 10 and cadence.log_due(10)
