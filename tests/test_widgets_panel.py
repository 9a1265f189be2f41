"""Panel renders into its output area without capturing (see perflab/course/widgets.py: capture stalls headless runs)."""

import pytest

pytest.importorskip("ipywidgets")


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
