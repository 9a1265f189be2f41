"""SwiGLU widths before measuring: what released models chose, how ⌊8/3·h⌋ aligns, every candidate's
model-only figures, and a published search (lesson 05's tables, `perflab.gemm.swiglu` times them).

The published records come from `perflab.course.reference.published` (`swiglu_widths`,
`swiglu_h100_h4096`, with their sources); the functions here take them as arguments. Every table has
readable column names with units, its numbers formatted by `perflab.core.readout`; `candidate_table`
and `from_published` keep raw columns for the figures that draw them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perflab.core.readout import num, plain
from perflab.gemm.swiglu import baseline_width, candidate_widths, eight_thirds, params_delta


def baseline_alignment(hs, target=None, tokens: int = 8192):
    """For each h: ⌊8/3·h⌋, the largest power of two dividing it, and the tile/wave model's
    utilization of the forward GEMM (tokens×h by h×d_ff) on `target` (a shapes.ModelTarget), in %."""
    import pandas as pd

    from perflab.gemm.shapes import largest_pow2_divisor, wave_model

    rows = []
    for h in hs:
        base = baseline_width(h)
        up = -(-base // 64) * 64
        row = {"h": h, "8/3·h": plain(eight_thirds(h), 6), "⌊8/3·h⌋": base, "divisible by": largest_pow2_divisor(base),
               "next multiple of 64": up}
        if target is not None:
            row["model utilization, fwd GEMM (%)"] = num(
                100 * wave_model(tokens, base, h, sms=target.sms, tile=(128, 256)).utilization)
            row["… at the multiple of 64 (%)"] = num(
                100 * wave_model(tokens, up, h, sms=target.sms, tile=(128, 256)).utilization)
        rows.append(row)
    return pd.DataFrame(rows).set_index("h")


def released_widths(record: Mapping[str, Any]):
    """Released SwiGLU models' widths (`perflab.course.reference.published('swiglu_widths')`) against 8/3·h:
    d_ff / h, the largest power of two dividing d_ff, and the parameters against 8/3·h's."""
    import pandas as pd

    from perflab.gemm.shapes import largest_pow2_divisor

    return pd.DataFrame([{"model": r["model"], "h": r["hidden"], "d_ff": r["d_ff"], "d_ff / h": plain(r["d_ff"] / r["hidden"]),
                          "8/3·h": plain(eight_thirds(r["hidden"]), 6), "divisible by": largest_pow2_divisor(r["d_ff"]),
                          "parameters vs 8/3·h (%)": f"{100 * params_delta(r['hidden'], r['d_ff']) / (8 * r['hidden'] ** 2):+.1f}"}
                         for r in record["rows"]])


def published_table(record: Mapping[str, Any]):
    """The published H100 search (`from_published`) as the lesson shows it: as published, with the
    speed-up and the parameters computed from it."""
    import pandas as pd

    df = from_published(dict(record))
    return pd.DataFrame([{"d_ff": int(r["d_ff"]), "TFLOP/s (published)": plain(r["tflops"]),
                          "vs ⌊8/3·h⌋ (×)": num(r["speedup_vs_baseline"]),
                          "parameters vs 8/3·h": f"{int(r['params_delta']):+,}", "MLP parameters": f"{int(r['mlp_params']):,}"}
                         for r in df.to_dict("records")])


def candidate_table(h: int, radius: int = 100, step: int = 4, *, target=None, tokens: int = 8192,
                    dtype: str = "bf16"):
    """Every candidate width with what can be said before measuring: ratio to h, parameter change
    against 8/3·h, the largest power of two dividing it, whether it meets the Tensor Core rule for
    `dtype` on `target` (a shapes.ModelTarget), and the tile/wave model's utilization of the
    forward GEMM (tokens×h by h×d_ff, 128×256 tiles) on it."""
    import pandas as pd

    from perflab.gemm.shapes import largest_pow2_divisor, tensor_core_alignment, wave_model

    rule = tensor_core_alignment(dtype, target.spec.id) if target is not None and target.spec is not None else None
    base = baseline_width(h)
    rows = []
    for w in candidate_widths(h, radius, step):
        row = {"d_ff": w, "ratio": w / h, "params_delta_pct": 100 * params_delta(h, w) / (8 * h * h),
               "divisible by": largest_pow2_divisor(w), "baseline": w == base}
        if rule is not None and rule.recommended:
            row["Tensor Core rule"] = ("best" if w % rule.recommended == 0 else
                                       "minimum" if rule.required and w % rule.required == 0 else "fails")
        if target is not None:
            row["model utilization"] = wave_model(tokens, w, h, sms=target.sms, tile=(128, 256)).utilization
        rows.append(row)
    return pd.DataFrame(rows)


def from_published(record: dict[str, Any]):
    """The published H100 search (perflab.course.reference.published('swiglu_h100_h4096')) as a DataFrame."""
    import pandas as pd

    h = record["hidden"]
    df = pd.DataFrame(record["rows"])
    df["params_delta"] = 3 * h * df["d_ff"] - 8 * h * h
    base = df.loc[df["baseline"], "tflops"].iloc[0]
    df["speedup_vs_baseline"] = df["tflops"] / base
    return df


def candidate_view(table, top: int = 10, dtype: str = "bf16"):
    """`candidate_table` as the planning panel shows it: the `top` candidates the model rates highest (the
    tile/wave model's utilization, then the smallest parameter change), ⌊8/3·h⌋ always among them, with
    readable columns."""
    import pandas as pd

    t = table.assign(_abs=table["params_delta_pct"].abs())
    by = ["model utilization", "_abs"] if "model utilization" in t else ["_abs"]
    pick = t.sort_values(by, ascending=[False, True][: len(by)]).head(top)
    if not pick["baseline"].any():
        pick = pd.concat([pick.head(top - 1), t[t["baseline"]]])
    rows = []
    for r in pick.to_dict("records"):
        row = {"d_ff": int(r["d_ff"]) if not r["baseline"] else f"{int(r['d_ff'])} (⌊8/3·h⌋)",
               "d_ff / h": plain(r["ratio"]), "parameters vs 8/3·h (%)": f"{r['params_delta_pct']:+.2f}",
               "divisible by": int(r["divisible by"])}
        if "Tensor Core rule" in r:
            row[f"Tensor Core rule ({dtype})"] = r["Tensor Core rule"]
        if "model utilization" in r:
            row["model utilization, fwd GEMM (%)"] = num(100 * r["model utilization"])
        rows.append(row)
    return pd.DataFrame(rows)
