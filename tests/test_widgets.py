"""Panels: a slider change re-runs the function; a bad value becomes one line, not a traceback."""

import pytest

pytest.importorskip("ipywidgets")

from perflab.core.errors import InputError
from perflab.course.widgets import Panel, choice, int_slider, log2_slider


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


def test_the_roofline_slider_refuses_a_size_it_cannot_measure_in_its_budget():
    # A slider answers in about a second: a size predicted to take longer is refused in one line that
    # names the largest size that fits and the command that times it once (no minute-long freeze,
    # e.g. a 4096³ bf16 matmul on a CPU without native bf16).
    from perflab.core.device import describe, pick_device
    from perflab.core.hardware import peaks_for
    from perflab.course import plots

    dev = pick_device("cpu")
    info, peaks = describe(dev), peaks_for(describe(dev))
    with pytest.raises(InputError, match=r"512³ fp32 would take about .* choose n ≤ \d+.*perflab matmul --m 512"):
        plots.measure_on_roofline(512, "fp32", dev, info, peaks, rep_ms=5, warmup_ms=1, budget_s=1e-6)
    fig, r = plots.measure_on_roofline(128, "fp32", dev, info, peaks, rep_ms=5, warmup_ms=1, budget_s=None)
    assert r.tflops > 0 and fig.axes
    call_s, rate = plots.predicted_call_s(128, "fp32", dev)
    assert rate > 0 and call_s == pytest.approx(2 * 128**3 / (rate * 1e12))
    fast, assumed = plots.predicted_call_s(4096, "fp32", dev, peak_tflops=1e6)  # a spec peak bounds the guess
    assert assumed == pytest.approx(0.5e6) and fast < 1e-6


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


def test_tables_show_meaningful_digits_without_padded_zeros():
    from perflab.course.notebook import trimmed

    assert [trimmed(x) for x in (0.8, 1.2, 27.0, 0.0012, 1234.5, 22.7, 3.14159, 0.0)] == \
        ["0.8", "1.2", "27", "0.0012", "1,234", "22.7", "3.142", "0"]


def test_readable_tables_say_what_is_missing_and_why():
    import pandas as pd

    from perflab.course.notebook import readable

    df = pd.DataFrame({"name": ["a", "b"], "fp8": [1979.0, None], "SMs": [132, 108]})
    out = readable(df, {"fp8": "no fp8 on the datasheet"})
    assert list(out["fp8"]) == ["1,979", "no fp8 on the datasheet"] and list(out["SMs"]) == ["132", "108"]
