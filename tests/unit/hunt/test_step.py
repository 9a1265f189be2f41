"""The hunt's step: every switch does what it says and keeps parity; a model-changing fix breaks it."""

from dataclasses import replace

import pytest

from perflab.core.errors import InputError
from perflab.hunt.pool import NAMES, regression
from perflab.hunt.sizes import SMOKE
from perflab.hunt.step import HuntStep, parity

SZ = replace(SMOKE, worker_start_s=0.0, io_ms=0.0, epoch_steps=2)
STEPS = 4


def _run(planted=(), fixes=()):
    s = HuntStep(planted, fixes, SZ)
    try:
        s.run(STEPS)
        return s.loss, s.counters(), s
    finally:
        s.close()


@pytest.fixture(scope="module")
def clean_loss():
    return _run()[0]


@pytest.mark.parametrize("name", NAMES)
def test_each_switch_keeps_parity_and_its_fix_turns_it_back(name, clean_loss):
    loss, counters, s = _run((name,))
    assert parity(loss, clean_loss)[0], name
    assert name in s._on
    fixed = HuntStep((name,), (regression(name).fix,), SZ)
    assert not fixed._on
    fixed.close()


def test_the_switches_show_on_their_counters():
    assert _run(("gc",))[1].gen2_per_step >= 1
    assert _run(("loader",))[1].loader_workers == 0
    c = _run(("threads_over",))[1]
    assert c.threads > c.usable_cores
    assert _run(("respawn",))[1].worker_starts_per_epoch > 0
    assert _run()[1].worker_starts_per_epoch == 0


@pytest.mark.parametrize("fix", ["half_batch", "shorter_seq", "no_clipping"])
def test_a_fix_that_changes_the_model_breaks_parity(fix, clean_loss):
    assert not parity(_run((), (fix,))[0], clean_loss)[0]


@pytest.mark.parametrize("user", ["ada", "bob", "learner7"])
def test_a_draw_of_three_runs_and_keeps_parity(user, clean_loss):
    from perflab.hunt.draw import draw_for, reveal_draw

    loss, _c, _s = _run(reveal_draw(draw_for(user, 3)))
    assert parity(loss, clean_loss)[0]


def test_an_unknown_fix_is_one_line():
    with pytest.raises(InputError, match="unknown fix"):
        HuntStep((), ("reboot",), SZ)


def test_a_measured_recovery_in_the_graders_process(tmp_path):
    """Bounded and robust to a loaded machine: gc's full collection costs many times the smoke step,
    so its fix recovers a large share whatever the load; parity must hold."""
    from perflab.hunt.report import Claim, grade

    g = grade([Claim("gc_full_collections", "a gen-2 collection every step", "no_gc_in_step")], ("gc",),
              {"gc": 0.5}, sizes_name="smoke", reps=1)
    assert g.parity_ok and g.recall == 1.0
    assert g.recovery is not None and g.recovery.recovered["no_gc_in_step"] > 0


def test_interleaved_rounds_carry_the_machines_quietness():
    import itertools

    from perflab.core.quietness import MadeUpLoad, injected
    from perflab.hunt.step import interleaved

    seconds = itertools.count(0.0, 1.0)  # a made-up clock: every reading one second after the last
    with injected(MadeUpLoad(0.9, clock=lambda: float(next(seconds)))):
        t = interleaved({"clean": lambda: HuntStep((), (), SZ)}, reps=1)
    assert t["clean"].quietness.disturbed and t["clean"].step_s > 0
