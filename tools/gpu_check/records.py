"""What the check reads back and decides by: the files its children wrote (JSON, pytest's reports, an
executed notebook's first error, a log's tail), a phase's verdict from its items, a figure held against
its bounds, and the summary's key figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def tail(path: Path, n: int = 1500) -> str:
    try:
        data = path.read_bytes()[-n:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def verdict(items: list[dict[str, Any]]) -> tuple[str, str]:
    """A phase's status and reason from its items: failed if any failed, skipped if every one was
    skipped (or none ran), passed otherwise; the reason names the failures, then the skips."""
    failed = [i for i in items if i.get("status") == "failed"]
    skipped = [i for i in items if i.get("status") in ("skipped", "not run")]
    left = sum(i.get("status") == "not run" for i in items)
    head = f"{left} of {len(items)} not run for want of time; " if left else ""
    if failed:
        return "failed", (head + "; ".join(f"{i['name']}: {i.get('reason', 'failed')}" for i in failed))[:2000]
    reason = (head + "; ".join(f"{i['name']}: {i.get('reason', 'skipped')}" for i in skipped))[:2000]
    if not items:
        return "skipped", "nothing to run"
    if len(skipped) == len(items):
        return "skipped", reason
    return "passed", reason


def within(name: str, value: float | None, low: float | None, high: float | None, what: str) -> dict[str, Any]:
    """A figure held against its bounds: one check of a probe."""
    ok = value is not None and (low is None or value >= low) and (high is None or value <= high)
    return {"check": name, "value": value, "low": low, "high": high, "ok": bool(ok), "what": what}


def read_json(path: Path) -> Any:
    """The JSON a child printed to `path`, even after lines some library printed before it.
    Raises OSError or ValueError when there is none."""
    text = path.read_text(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        for m in re.finditer(r"^[\[{]", text, re.M):
            try:
                return json.JSONDecoder().raw_decode(text[m.start():])[0]
            except ValueError:
                continue
        raise


def read_reports(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except ValueError:
            continue
    return out


def notebook_error(path: Path) -> str | None:
    """The first error an executed notebook shows: 'cell N: Name: message'."""
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for i, cell in enumerate(nb.get("cells", [])):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                return f"cell {i}: {o.get('ename')}: {str(o.get('evalue', '')).splitlines()[0][:300] if o.get('evalue') else ''}"
    return None


def key_figures(phases: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader looks for first, from the phases' own."""
    inst = phases.get("instruments", {})
    # a probe skipped for want of a GPU ran at CPU sizes: its figures stay in the phase, not in the headline
    skipped = {i["name"] for i in inst.get("items", []) if i.get("status") != "passed" and i.get("status") != "failed"}
    ins = {k: v for k, v in inst.get("figures", {}).items() if k not in skipped}
    mm, cp, hc = ins.get("matmul", {}), ins.get("copy", {}), ins.get("host_copies", {})
    at, me, au = ins.get("attention", {}), ins.get("memory", {}), ins.get("audit", {})
    nb = phases.get("notebooks", {}).get("figures", {})
    return {
        "timer_over_do_bench": mm.get("ratio"), "matmul_tflops": mm.get("tflops"), "matmul_burst_tflops": mm.get("burst_tflops"),
        "matmul_sm_clock_mhz": mm.get("sm_clock_mhz_median"), "matmul_peak_tflops": mm.get("peak_tflops"),
        "matmul_peak_fraction": mm.get("peak_fraction"), "device_copy_gbps": cp.get("gbps"),
        "device_copy_over_do_bench": cp.get("ratio"), "pinned_gbps": hc.get("pinned_gbps"),
        "pageable_gbps": hc.get("pageable_gbps"), "attention_triton_s": at.get("triton_s"), "attention_sdpa_s": at.get("sdpa_s"),
        "attention_max_abs_err": at.get("max_abs_err"), "memory_estimate_error": me.get("error"),
        "audit_mfu": au.get("mfu"), "audit_mfu_basis": au.get("mfu_basis"), "notebook_seconds": nb.get("seconds"),
    }
