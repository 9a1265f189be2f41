"""Readouts a person reads: rounded numbers with units, the spread, and a note when it is noisy.

    >>> r = measure_matmul(512, 512, 512)
    >>> r                       # in a notebook: a small table (HTML), in a terminal: aligned text
    >>> print(r.readout())      # the same table as text

A `Readout` is a short titled table of (quantity, value) rows whose values are already strings,
rounded to a few significant digits with their unit, plus optional notes (such as "noisy: ...").
Result objects (`BenchResult`, `MatmulResult`, `BandwidthResult`, ...) return one from `readout()`
and use it for `str()`, for IPython's text display and for `_repr_html_`, so a notebook never
shows a raw dataclass repr or an unrounded float.

Noise: a timing's spread is its interquartile range over its median. The middle half of the
samples of an undisturbed kernel lies within a few percent; when another process shares the
device, samples slow down at random and the spread widens. Above `NOISY_SPREAD` (10 %) the readout
says so, and the numbers should be measured again.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

NOISY_SPREAD = 0.10  # IQR / median above which a timing is called noisy


def num(x: float | int | None, sig: int = 3) -> str:
    """`x` rounded to `sig` significant digits, with thousands separators: 0.0317, 1,234, 2.85e-07."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(float(f"{x:.{max(sig, 1) - 1}e}"))))  # of x rounded: 0.9996 is 1.0, not 1.00
    if mag >= 6 or mag < -4:
        return f"{x:.{sig - 1}e}"
    decimals = max(0, sig - 1 - mag)
    return f"{x:,.{decimals}f}"


def plain(x: float | int | None, sig: int = 4) -> str:
    """`num` without padded zeros, for figures typed from a datasheet or a count: 0.8 (not 0.800), 1,979, 27."""
    return _trim(num(x, sig))


def seconds(s: float | None, sig: int = 3) -> str:
    """A duration with a unit that keeps it readable: 8.47 ms, 312 µs, 1.20 s."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "n/a"
    a = abs(s)
    if a >= 1 or a == 0:
        return f"{num(s, sig)} s"
    if a >= 1e-3:
        return f"{num(s * 1e3, sig)} ms"
    if a >= 1e-6:
        return f"{num(s * 1e6, sig)} µs"
    return f"{num(s * 1e9, sig)} ns"


def percent(f: float | None, sig: int = 3) -> str:
    """A fraction as a percentage: 0.0423 → '4.23 %'."""
    if f is None or (isinstance(f, float) and math.isnan(f)):
        return "–"
    return f"{num(f * 100, sig)} %"


def nbytes(b: float | int | None) -> str:
    """A byte count in decimal units (GB = 1e9 bytes): '268 MB'."""
    if b is None:
        return "–"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            return f"{num(b / scale)} {unit}"
    return f"{int(b)} B"


def binary_bytes(b: float | int | None, sig: int = 3, decimal_too: bool = True) -> str:
    """A byte count in binary units (GiB = 2**30 bytes), to `sig` significant digits with no trailing
    zeros: '3 MiB', '1.5 KiB'; from 1 GiB up also in decimal units when `decimal_too`:
    '3 GiB (3.22 GB)'. Memory sizes are binary (allocators, page tables); link and disk sizes
    decimal (`nbytes`)."""
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "–"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            text = f"{_trim(num(b / scale, sig))} {unit}"
            if decimal_too and scale >= 2**30:
                text += f" ({_trim(num(b / 1e9, sig))} GB)"
            return text
    return f"{int(b)} B"


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def mib(b: float | int | None) -> str:
    """A byte count in binary units (MiB = 2**20 bytes), for pages that speak in MiB: '31.0 MiB'."""
    if b is None:
        return "–"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{int(b)} B"


MACHINE = "machine while measured"  # the column a table's quietness goes in


def machine(q: object) -> str:
    """A table cell for a measurement's quietness (a `perflab.core.quietness.Quietness`): 'quiet',
    'busy: other programs used 79 % of 2 cores' (a disturbed one: its row draws no conclusion) or
    'unknown: too short to tell (8 ms)'."""
    verdict, cause = str(getattr(q, "verdict", "unknown")), str(getattr(q, "cause", "") or "")
    if verdict == "quiet":
        return "quiet"
    word = "busy" if verdict == "disturbed" else "unknown"
    return f"{word}: {cause}" if cause else word


def spread_note(spread: float | None, what: str = "timing") -> str | None:
    """The "noisy" note for a relative spread (IQR / median) above NOISY_SPREAD, else None."""
    if spread is None or math.isnan(spread) or spread <= NOISY_SPREAD:
        return None
    return (f"noisy: the middle half of the {what} samples spans {percent(spread, 2)} of the median "
            "(something else is using the device?): measure again before trusting it")


class Readout:
    """A titled table of (quantity, value) rows, shown as HTML in a notebook and as text elsewhere."""

    def __init__(self, title: str, rows: Iterable[tuple[str, str]], notes: Iterable[str | None] = ()):
        self.title = title
        self.rows = [(str(k), str(v)) for k, v in rows]
        self.notes = [n for n in notes if n]

    @property
    def noisy(self) -> bool:
        return any(n.startswith("noisy") for n in self.notes)

    def as_dict(self) -> dict[str, str]:
        return dict(self.rows)

    def __str__(self) -> str:
        width = max((len(k) for k, _ in self.rows), default=0)
        lines = [self.title] + [f"  {k:<{width}}  {v}" for k, v in self.rows] + [f"  ⚠ {n}" for n in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        e = html.escape
        body = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:right'>{e(v)}</td></tr>"
                       for k, v in self.rows)
        notes = "".join(f"<div style='color:#b35900'>⚠ {e(n)}</div>" for n in self.notes)
        return (f"<div class='perflab-readout'><b>{e(self.title)}</b>"
                f"<table style='margin:2px 0'>{body}</table>{notes}</div>")


class ReadoutMixin:
    """For result dataclasses: define `readout()`; str(), notebook text and HTML all use it."""

    def readout(self) -> Readout:  # pragma: no cover - overridden
        raise NotImplementedError

    def __str__(self) -> str:
        return str(self.readout())

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self.readout()))

    def _repr_html_(self) -> str:
        return self.readout()._repr_html_()

    @property
    def noisy(self) -> bool:
        return self.readout().noisy
