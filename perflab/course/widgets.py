"""Thin widgets: sliders wired to a pure function that computes and draws.

    >>> panel = Panel(plot_point, size=int_slider("size", 256, 64, 2048, 64), dtype=choice("dtype", ["fp32", "bf16"]))
    >>> panel                      # shows the controls and the first result
    >>> panel.last                 # what the function returned last (assert on this in tests)

The function gets the controls' values as keyword arguments and returns a matplotlib Figure, a
DataFrame, a string, or a tuple of those. The panel redraws its one output area in place
(`continuous_update=False`, so a slider answers once on release), and a bad value shows as one
line ("m must be ≥ 1 ...") instead of a traceback. ipywidgets is imported only when a panel is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from perflab.core.errors import PerflabError, one_line
from perflab.core.jsonable import JSON


def _ipywidgets():
    from perflab.core.extras import need

    return need("ipywidgets", "course", "the lessons' widgets")


def int_slider(description: str, value: int, min: int, max: int, step: int = 1, **kw):
    w = _ipywidgets()

    return w.IntSlider(value=value, min=min, max=max, step=step, description=description,
                       continuous_update=False, style={"description_width": "initial"}, **kw)


def log2_slider(description: str, value: int, min: int, max: int, **kw):
    """A slider over powers of two (value, min, max are the numbers themselves)."""
    w = _ipywidgets()

    opts = []
    v = min
    while v <= max:
        opts.append(v)
        v *= 2
    return w.SelectionSlider(options=opts, value=value, description=description, continuous_update=False,
                             style={"description_width": "initial"}, **kw)


def choice(description: str, options: list, value=None, **kw):
    w = _ipywidgets()

    return w.Dropdown(options=options, value=value if value is not None else options[0], description=description, **kw)


def toggle(description: str, value: bool = False, **kw):
    w = _ipywidgets()

    return w.Checkbox(value=value, description=description, **kw)


class Panel:
    """Controls + one output area, wired to `fn(**values)`."""

    def __init__(self, fn: Callable[..., Any], title: str | None = None, *, busy: str | None = None, **controls):
        """`busy`: what the panel does while `fn` runs ("measuring a matmul"); shown at once when a
        control moves, so a learner sees that the panel is working and on what."""
        w = _ipywidgets()

        self.fn = fn
        self.busy = busy
        self.controls = controls
        self.out = w.Output()
        self.last: Any = None
        self.last_error: str | None = None
        self.calls = 0
        self._quiet = False
        for c in controls.values():
            c.observe(self._changed, names="value")
        header = [w.HTML(f"<b>{title}</b>")] if title else []
        self.widget = w.VBox(header + [w.HBox(list(controls.values()), layout=w.Layout(flex_flow="row wrap")), self.out])
        self.widget.add_class("perflab-panel")  # how the browser test finds a lesson's panels

    @property
    def values(self) -> dict[str, Any]:
        return {k: c.value for k, c in self.controls.items()}

    def _changed(self, _change) -> None:
        if not self._quiet:
            self.update()

    def set(self, **values) -> Any:
        """Set controls (as a learner would drag them) and return the new result (one update)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise KeyError(f"no control named {', '.join(sorted(unknown))}; controls: {', '.join(self.controls)}")
        self._quiet = True
        try:
            for k, v in values.items():
                self.controls[k].value = v
        finally:
            self._quiet = False
        return self.update()

    def update(self) -> Any:
        import matplotlib.pyplot as plt

        self.calls += 1
        if self.busy:
            self.out.outputs = (_stream(f"… {self.busy} ({_describe(self.values)})"),)
        try:
            result = self.fn(**self.values)
            self.last, self.last_error = result, None
            outputs = _outputs(result)
        except PerflabError as e:
            self.last_error = one_line(e)
            outputs = [_stream(f"⚠ {self.last_error}")]
        except Exception as e:  # keep the panel alive; say what happened in one line
            from perflab.core.results import classify_failure

            self.last_error = one_line(e)
            prefix = "out of memory: choose smaller sizes — " if classify_failure(e) == "oom" else ""
            outputs = [_stream(f"⚠ {prefix}{self.last_error}")]
        finally:
            plt.close("all")
        # One assignment replaces the area's outputs (no flicker). Capturing with `with self.out:`
        # would make a headless client (nbclient, papermill) send comm messages back to the kernel
        # while the cell runs, which with ipykernel 7 intermittently left the cell without its
        # reply: the cell hung until the client's timeout.
        self.out.outputs = tuple(outputs)
        return self.last

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
        self.update()


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())


def _stream(text: str) -> JSON:  # a Jupyter output record (nbformat's JSON)
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def _outputs(result: Any) -> list[JSON]:
    """The result (or each item of a tuple) as Jupyter output records: figures and tables through
    IPython's display formatter (PNG, HTML), anything else as text."""
    from IPython.core.interactiveshell import InteractiveShell

    if result is None:
        return []
    from IPython.core.formatters import DisplayFormatter

    formatter = InteractiveShell.instance().display_formatter
    if not isinstance(formatter, DisplayFormatter):  # pragma: no cover - an InteractiveShell always has one
        raise RuntimeError("IPython has no display formatter")
    fmt = formatter.format
    out = []
    for item in result if isinstance(result, tuple) else (result,):
        fig = item if _is_figure(item) else getattr(item, "figure", None)
        obj = fig if _is_figure(fig) else item
        readout = getattr(obj, "readout", None)
        if callable(readout):  # a result object: its table, never its repr
            r: Any = readout()  # a perflab Readout: str() is its text, _repr_html_() its table
            out.append({"output_type": "display_data", "metadata": {},
                        "data": {"text/plain": str(r), "text/html": r._repr_html_()}})
        elif _is_figure(obj) or hasattr(obj, "to_html") or hasattr(obj, "_repr_html_"):
            data, metadata = fmt(obj)
            out.append({"output_type": "display_data", "data": data, "metadata": metadata})
        else:
            out.append(_stream(str(obj)))
    return out


def _is_figure(x: Any) -> TypeGuard[Figure]:
    try:
        from matplotlib.figure import Figure

        return isinstance(x, Figure)
    except ImportError:  # pragma: no cover
        return False
