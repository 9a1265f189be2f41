"""Tests of `perflab.hunt.sizes`: lesson 14's sizes by kind of run, and by name for a grader's process."""

import pytest

from perflab.core.errors import InputError
from perflab.core.sizes import for_run
from perflab.hunt.sizes import LESSON, SIZES, SMOKE, named


def test_the_step_runs_on_the_cpu_wherever_the_lesson_runs():
    assert set(SIZES) == {"smoke", "gpu"}
    assert for_run(SIZES, False, "cpu") is LESSON and for_run(SIZES, False, "cuda") is LESSON
    assert for_run(SIZES, True, "cpu") is SMOKE


def test_sizes_by_name_as_a_graders_process_is_told_them():
    assert named("lesson") is LESSON and named("smoke") is SMOKE
    with pytest.raises(InputError, match="^unknown sizes 'cpu': use smoke or lesson$"):
        named("cpu")


def test_smoke_is_the_same_shape_smaller_and_quicker():
    assert SMOKE.cfg.name == LESSON.cfg.name and SMOKE.cfg.layers < LESSON.cfg.layers and SMOKE.seq < LESSON.seq
    assert SMOKE.io_ms < LESSON.io_ms and SMOKE.reps == 2 and LESSON.reps == 3
    assert LESSON.describe() == (f"the step: {LESSON.cfg.name}, batch 4 sequences of {LESSON.seq} tokens, 4 steps per "
                                 "epoch, 1 intra-op thread(s)")
