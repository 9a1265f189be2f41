"""Tests of `perflab.course.widgets`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.course.widgets import Panel, choice, int_slider, log2_slider

pytest.importorskip("ipywidgets")


# ----------------------------------------------------------------------------- widgets
def test_a_panel_refuses_controls_it_does_not_have_and_shows_nothing_for_none():
    from perflab.course import widgets as W

    panel = W.Panel(lambda n: n * 2, n=W.int_slider("n", 1, 1, 4))
    assert panel.set(n=3) == 6
    with pytest.raises(KeyError, match=r"no control named m, z; controls: n"):
        panel.set(z=1, m=2)
    assert panel.values == {"n": 3}
    assert W._outputs(None) == []


def test_panel_updates_and_reports_errors():
    calls = []

    def fn(n, dt):
        calls.append((n, dt))
        if n > 100:
            raise InputError(f"n={n} is too large: choose n ≤ 100")
        return f"{n} {dt}"

    p = Panel(fn, n=int_slider("n", 10, 1, 1000), dt=choice("dtype", ["fp32", "bf16"]))
    assert p.update() == "10 fp32" and p.last_error is None
    assert p.set(n=20) == "20 fp32"
    p.set(dt="bf16")
    assert calls[-1] == (20, "bf16")
    p.set(n=500)
    assert p.last_error == "n=500 is too large: choose n ≤ 100"
    assert p.last == "20 bf16"  # the last good result is kept


def test_panel_survives_unexpected_errors():
    p = Panel(lambda n: 1 / 0, n=int_slider("n", 1, 1, 3))
    p.update()
    assert p.last_error.startswith("ZeroDivisionError")


def test_oom_is_named():
    import torch

    def boom(n):
        raise torch.OutOfMemoryError("CUDA out of memory")

    p = Panel(boom, n=int_slider("n", 1, 1, 3))
    p.update()
    assert "out of memory" in p.last_error.lower()


def test_log2_slider_options():
    s = log2_slider("n", 256, 64, 1024)
    assert list(s.options) == [64, 128, 256, 512, 1024] and s.value == 256
    assert s.continuous_update is False


def test_set_runs_the_function_once():
    calls = []
    p = Panel(lambda a, b: calls.append((a, b)) or a + b, a=int_slider("a", 1, 1, 9), b=int_slider("b", 1, 1, 9))
    assert p.set(a=3, b=4) == 7
    assert calls == [(3, 4)]
    p.controls["a"].value = 5  # a learner dragging still updates
    assert calls[-1] == (5, 4) and p.last == 9


def test_a_busy_panel_says_what_it_measures_before_the_result():
    from perflab.course.widgets import Panel, int_slider

    seen = []
    panel = None

    def slow(n):
        seen.append(tuple(o.get("text", "") for o in panel.out.outputs))
        return f"n = {n}"

    panel = Panel(slow, busy="measuring a matmul", n=int_slider("n", 4, 1, 8))
    assert panel.set(n=5) == "n = 5"
    assert seen and "measuring a matmul (n = 5)" in seen[-1][0]
    assert "measuring" not in str(panel.out.outputs)  # replaced by the result


def test_panel_outputs_and_errors():
    import matplotlib.pyplot as plt

    from perflab.core.errors import InputError
    from perflab.course.widgets import Panel, int_slider

    def fn(n):
        if n > 5:
            raise InputError(f"n={n} is too large: choose n ≤ 5")
        fig, ax = plt.subplots()
        ax.plot(range(n))
        return fig, f"n={n}"

    p = Panel(fn, n=int_slider("n", 3, 1, 10))
    p.update()
    kinds = [o["output_type"] for o in p.out.outputs]
    assert kinds == ["display_data", "stream"] and p.last_error is None
    assert p.out.outputs[1]["text"] == "n=3\n"
    p.set(n=7)
    assert p.last_error == "n=7 is too large: choose n ≤ 5"
    assert [o["output_type"] for o in p.out.outputs] == ["stream"] and "⚠" in p.out.outputs[0]["text"]
    assert p.last[1] == "n=3"  # the last good result is kept
