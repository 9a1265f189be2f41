"""Predict, then measure: the learner writes a number down before the measurement runs.

    >>> p = ask("01", "tflops_1024", "TFLOP/s of a 1024³ fp32 matmul here", unit="TFLOP/s",
    ...         given=predictions)                # a box to type into (then run the next cell)
    >>> p                                         # in a notebook: shows the box
    >>> reveal(p, measured=r.tflops)              # prediction | measurement | error, side by side
    >>> calibration("01")                         # at the end of a lesson: how far off, which way

A prediction is either a number with its unit, or one of a few `choices`. The learner types it
into the box that `ask` shows; the measurement cell that follows calls `reveal`, which reads the
box *as it is then*, so a number typed after the measurement ran is not a prediction of it (the
record keeps the time at which each was read).

* The prediction that counts is the one entered before its result was first shown. A learner who
  changes it afterwards and runs the measurement cell again keeps that first prediction; the change
  is said beside the result ("changed to … after the result was shown") and not scored.
* A value that first appears after its result was shown is marked `late`, said so beside the
  result, and left out of `calibration`.
* With Run All every cell runs before anyone could type: the result says that no prediction was
  entered and how to predict as you go (one cell at a time), without scoring anything.
* A measurement taken while the machine was busy (`quietness=` disturbed) is shown, but the
  prediction is not scored against it: the machine's neighbours moved the number, not the learner.

Under papermill (tests, a teacher's batch run) nobody types: every lesson's parameters cell has
`predictions = {}`, a dict of key → value, and `ask(..., given=predictions)` takes the value from
there.

Every `reveal` appends one JSON line to `<results>/predictions.jsonl` (the results folder of
`perflab.core.results`), so a teacher can collect a class's predictions:
`lesson, key, question, unit, predicted, measured, error_pct, correct, direction, device, late, time`
(and `changed_to` when the box changed after the result, `busy` when the machine was).
`error_pct` is (predicted − measured) / measured × 100 for numbers (positive: over-estimated);
`correct` is set for choices.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.readout import num as _num


def num(x: float | int | None, sig: int = 3) -> str:
    """`x` to `sig` significant digits without padded zeros: 1.2 (not 1.20), 0.5, 27. A whole number of
    a million or more (a count, such as a layer's FLOPs) is written in full: 536,870,912, not 5.37e+08."""
    if isinstance(x, float) and x.is_integer() and 1e6 <= abs(x) < 1e15:
        return f"{int(x):,}"
    text = _num(x, sig)
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return text

ON_THE_MARK = 0.10  # |predicted/measured − 1| within which a numeric prediction counts as right

_RECORDS: dict[tuple[str, str], dict[str, Any]] = {}  # (lesson, key) -> latest record, this kernel
_FIRST_REVEAL: dict[tuple[str, str], Any] = {}  # (lesson, key) -> what was entered when its result was first shown

HOW_TO_PREDICT = ("to predict as you go, run the lesson one cell at a time (Shift-Enter) and type your number in "
                  "each box before running the cell below it (Run All runs every cell without waiting for you)")


def parse_number(text: Any) -> float | None:
    """A learner's typed number: '0.3', '3e-1', '1,234', '12 ms' (a trailing unit is ignored).

    None for an empty entry; ValueError (one line) for text that holds no number."""
    if text is None:
        return None
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a number")
    if isinstance(text, int | float):
        v = float(text)
    else:
        s = str(text).strip().replace(",", "").replace("_", "")
        if not s:
            return None
        m = re.match(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", s)
        if not m:
            raise ValueError(f"could not read {str(text)!r} as a number")
        v = float(m.group(0))
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{text!r} is not a finite number")
    return v


@dataclass
class Prediction:
    """One thing the learner predicts. `value` is what is entered now (None if nothing)."""

    lesson: str
    key: str
    question: str
    unit: str = ""
    choices: tuple[str, ...] | None = None
    given: Any = None  # from the papermill `predictions` parameter
    _widget: Any = field(default=None, repr=False)

    @property
    def raw(self) -> Any:
        if self._widget is not None:
            v = self._widget.value
            if v not in (None, ""):
                return v
        return self.given

    @property
    def value(self) -> float | str | None:
        """The prediction as entered: a float, one of `choices`, or None. ValueError if unreadable."""
        raw = self.raw
        if raw is None or raw == "":
            return None
        if self.choices is not None:
            s = str(raw).strip()
            for c in self.choices:
                if s.lower() == c.lower():
                    return c
            raise ValueError(f"{s!r} is not one of: {', '.join(self.choices)}")
        return parse_number(raw)

    def widget(self):
        """The input box (made once). ipywidgets is imported only here."""
        if self._widget is None:
            import ipywidgets as w

            style = {"description_width": "initial"}
            layout = w.Layout(width="auto")
            if self.choices is not None:
                start = self.given if self.given in self.choices else None
                self._widget = w.RadioButtons(options=list(self.choices), value=start, layout=layout,
                                              style=style)
            else:
                start = "" if self.given is None else str(self.given)
                self._widget = w.Text(value=start, placeholder=f"your prediction, in {self.unit}" if self.unit
                                      else "your prediction", layout=w.Layout(width="16em"))
        return self._widget

    def _ipython_display_(self):
        from IPython.display import HTML, display

        unit = f" <i>({html.escape(self.unit)})</i>" if self.unit and self.choices is None else ""
        # the question is plain HTML, not part of the widget: after a kernel restart and a reload the
        # saved box cannot be shown ("model not found"), and this line still says how to get it back
        display(HTML(f"<div class='perflab-predict'><b>Predict:</b> {html.escape(self.question)}{unit} — enter it "
                     "in the box below, then run the next cell. <small>(No box below, after a restart? Run this "
                     "cell to get the box back.)</small></div>"))
        display(self.widget())

    def __repr__(self) -> str:
        v = self.raw
        return f"Predict: {self.question} [{self.unit}] — {'not entered yet' if v in (None, '') else v}"


def ask(lesson: str, key: str, question: str, unit: str = "", *, choices: Sequence[str] | None = None,
        given: Mapping[str, Any] | None = None) -> Prediction:
    """A prediction to be written down: shows a box in a notebook (display the returned object).

    `given` is the lesson's `predictions` parameter (a dict); its entry for `key`, if any, fills the box."""
    if choices is not None and not choices:
        raise ValueError("choices, when given, must list at least one answer")
    pre = (given or {}).get(key)
    return Prediction(str(lesson), key, question, unit, tuple(choices) if choices is not None else None, pre)


@dataclass
class Reveal:
    """A prediction beside its measurement."""

    record: dict[str, Any]
    note: str = ""

    @property
    def rows(self) -> list[tuple[str, str]]:
        r = self.record
        unit = f" {r['unit']}" if r["unit"] and r["correct"] is None else ""
        pred = "no prediction entered" if r["predicted"] is None else (
            f"{num(r['predicted'])}{unit}" if isinstance(r["predicted"], float) else str(r["predicted"]))
        meas = (f"{num(r['measured'])}{unit}" if isinstance(r["measured"], float) else
                "not known here" if r["measured"] is None else str(r["measured"]))
        rows = [("your prediction", pred), (r.get("against") or "measured", meas)]
        if r.get("busy"):
            rows.append(("error", f"not scored: the machine was busy ({r['busy']})"))
        elif r["error_pct"] is not None:
            rows.append(("error", f"{'+' if r['error_pct'] > 0 else ''}{num(r['error_pct'], 2)} % ({r['direction']})"))
        elif r["correct"] is not None:
            rows.append(("verdict", "right" if r["correct"] else "not this time"))
        return rows

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows)
        lines = [self.record["question"]] + [f"  {k:<{width}}  {v}" for k, v in self.rows]
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        e = html.escape
        body = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(v)}</td></tr>"
                       for k, v in self.rows)
        note = f"<div>{e(self.note)}</div>" if self.note else ""
        return f"<div class='perflab-reveal'><b>{e(self.record['question'])}</b><table>{body}</table>{note}</div>"


def _direction(err: float, tolerance: float) -> str:
    if abs(err) <= tolerance:
        return "on the mark"
    return "over-estimated" if err > 0 else "under-estimated"


def _device_name() -> str:
    try:
        from perflab.core.device import describe

        return describe().name
    except Exception:  # a record without a device is still a record
        return "unknown"


def reveal(pred: Prediction, measured: float | str | None, *, tolerance: float = ON_THE_MARK,
           device: str | None = None, save: bool = True, against: str | None = None,
           quietness: Any = None, missing: str = "") -> Reveal:
    """The learner's prediction beside the measurement, with the error; recorded for calibration.

    `tolerance` is the relative error that still counts as on the mark (default 10 %). Where this
    machine cannot measure the quantity, `against` names what the prediction is checked against
    instead (a published figure, e.g. "published (2x Xeon 8360Y)"): that label replaces
    "measured" in the table, and `device` should name the published hardware. `quietness` is the
    measurement's (`perflab.core.quietness`): a disturbed one is shown but not scored. `measured` None:
    there is nothing to compare with here, and `missing` says why (nothing is scored). The prediction
    scored is the one entered before this result was first shown (module docstring)."""
    from perflab.core.quietness import as_quietness

    note = ""
    try:
        predicted = pred.value
    except ValueError as e:
        predicted, note = None, f"{e}: type a plain number (in {pred.unit}) in the box above and run this cell again"
    k = (pred.lesson, pred.key)
    first_time = k not in _FIRST_REVEAL
    if first_time:
        _FIRST_REVEAL[k] = predicted
    first = _FIRST_REVEAL[k]
    changed_to = None
    late = False
    if not first_time and first is not None:  # predicted in time: that prediction stays the one scored
        if predicted is not None and predicted != first:
            changed_to = predicted
            note = (f"changed to {_shown(changed_to, pred)} after the result was shown: your prediction stays the one "
                    f"entered before it, {_shown(first, pred)}")
        predicted = first
    elif not first_time and predicted is not None:  # nothing when the result was first shown
        late = True
        note = ("entered after the result was shown: not a prediction of it, so it is marked as late and left out "
                "of your calibration")
    if predicted is None and not note:
        note = f"no prediction entered before this result: {HOW_TO_PREDICT}"
    q = as_quietness(quietness) if quietness is not None else None
    busy = (q.cause or "quietness not measured") if q is not None and q.disturbed else None
    error_pct = direction = correct = None
    if measured is None:
        note = missing or "nothing was measured here to compare your prediction with"
    elif pred.choices is not None:
        measured = str(measured)
        if predicted is not None and busy is None:
            correct = str(predicted).lower() == measured.lower()
    else:
        measured = float(measured)
        if predicted is not None and measured != 0 and busy is None:
            err = (float(predicted) - measured) / abs(measured)
            error_pct, direction = err * 100, _direction(err, tolerance)
    rec = {"lesson": pred.lesson, "key": pred.key, "question": pred.question, "unit": pred.unit,
           "predicted": predicted, "measured": measured, "error_pct": error_pct, "correct": correct,
           "direction": direction, "device": device or _device_name(), "late": late,
           "time": _dt.datetime.now().isoformat(timespec="seconds")}
    if changed_to is not None:
        rec["changed_to"] = changed_to
    if busy is not None:
        rec["busy"] = busy
    if against:
        rec["against"] = against
    _RECORDS[(pred.lesson, pred.key)] = rec
    if save:
        _append(rec)
    return Reveal(rec, note)


def _shown(value: Any, pred: Prediction) -> str:
    unit = f" {pred.unit}" if pred.unit and pred.choices is None else ""
    return f"{num(value)}{unit}" if isinstance(value, float) else str(value)


def _append(rec: dict[str, Any]) -> None:
    from perflab.core.results import results_root

    try:
        path = results_root() / "predictions.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
    except OSError:  # a read-only results folder must not stop the lesson; the record stays in memory
        pass


@dataclass
class Calibration:
    """How a lesson's predictions compared with the measurements."""

    lesson: str
    records: list[dict[str, Any]]

    @property
    def entered(self) -> list[dict[str, Any]]:
        """Predictions written before their result was shown and scored (late ones, and those measured on a
        busy machine, are left out)."""
        return [r for r in self.records if r["predicted"] is not None and r["measured"] is not None
                and not r.get("late") and not r.get("busy")]

    @property
    def busy(self) -> list[dict[str, Any]]:
        """Predictions whose measurement was taken on a busy machine: shown, not scored."""
        return [r for r in self.records if r["predicted"] is not None and not r.get("late") and r.get("busy")]

    @property
    def late(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("late")]

    @property
    def verdict(self) -> str:
        if not self.records:
            return f"lesson {self.lesson}: nothing was predicted yet"
        if not self.entered:
            asked = f"{len(self.records)} asked"
            if self.busy:
                return (f"lesson {self.lesson}: nothing scored: {asked}, and every prediction entered was measured on a "
                        "busy machine (run those cells again when it is quiet)")
            return (f"lesson {self.lesson}: nothing to calibrate yet ({asked}, none entered before its result"
                    + (f", {len(self.late)} after it" if self.late else "") + f"): {HOW_TO_PREDICT}")
        nums = [r for r in self.entered if r["error_pct"] is not None]
        picks = [r for r in self.entered if r["correct"] is not None]
        parts = [f"{len(self.entered)} of {len(self.records)} predicted"]
        if nums:
            errs = sorted(abs(r["error_pct"]) for r in nums)
            mid = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
            over = sum(r["error_pct"] > 0 and r["direction"] != "on the mark" for r in nums)
            under = sum(r["error_pct"] < 0 and r["direction"] != "on the mark" for r in nums)
            lean = ("you tend to over-estimate" if over > under else
                    "you tend to under-estimate" if under > over else "no consistent lean")
            parts.append(f"numbers: median miss {num(mid, 2)} %, {over} over, {under} under ({lean})")
        if picks:
            parts.append(f"choices: {sum(bool(r['correct']) for r in picks)} of {len(picks)} right")
        if self.late:
            parts.append(f"{len(self.late)} entered after the result was shown, left out")
        if self.busy:
            parts.append(f"{len(self.busy)} measured on a busy machine, not scored")
        return f"lesson {self.lesson}: " + "; ".join(parts)

    def frame(self):
        import pandas as pd

        rows = []
        for r in self.records:
            unit = f" {r['unit']}" if r["unit"] and r["correct"] is None else ""

            def fmt(v, unit=unit):
                return "–" if v is None else (f"{num(v)}{unit}" if isinstance(v, float) else str(v))

            miss = ("–" if r["error_pct"] is None and r["correct"] is None else
                    f"{'+' if (r['error_pct'] or 0) > 0 else ''}{num(r['error_pct'], 2)} %" if r["error_pct"] is not None
                    else ("right" if r["correct"] else "wrong"))
            if r.get("late"):
                miss = "late: left out"
            elif r.get("busy") and r["predicted"] is not None:
                miss = "not scored: machine busy"
            rows.append({"question": r["question"], "prediction": fmt(r["predicted"]),
                         "measured": fmt(r["measured"]) + (f" ({r['against']})" if r.get("against") else ""),
                         "miss": miss})
        return pd.DataFrame(rows, columns=["question", "prediction", "measured", "miss"])

    def __str__(self) -> str:
        lines = [self.verdict]
        for r in self.frame().to_dict("records"):
            lines.append(f"  {r['question']}: {r['prediction']} vs {r['measured']} ({r['miss']})")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        table = self.frame().to_html(index=False, escape=True) if self.records else ""
        return f"<div class='perflab-calibration'><b>{html.escape(self.verdict)}</b>{table}</div>"


def calibration(lesson: str) -> Calibration:
    """This kernel's predictions for `lesson`, beside their measurements, and the overall lean."""
    return Calibration(str(lesson), [r for (les, _), r in _RECORDS.items() if les == str(lesson)])


def reset() -> None:
    """Forget this kernel's predictions (the results file keeps them)."""
    _RECORDS.clear()
    _FIRST_REVEAL.clear()
