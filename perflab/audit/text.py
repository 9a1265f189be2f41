"""The audit as a terminal summary: units on every number, only the digits a timing supports."""

from __future__ import annotations

from typing import Any

from perflab.core.readout import nbytes, num, percent, seconds

CONVENTION = ("matmul-class FLOPs (2 per multiply-add), forward + backward, attention included and counted dense: the "
              "causal mask's skipped upper triangle is counted as computed, as torch's FlopCounterMode and "
              "6N + 12·L·H·Q·T count it; hardware FLOPs add recomputation")
HALVED = ("causal attention halved, as FlashAttention's benchmark flops() (// (2 if causal else 1)), the "
          "FlashAttention-2 paper §4.1 and Megatron-LM's attn_layer_flops count it")

LABELS = {"data_wait": "data wait", "host_sync": "host sync", "launch": "launch overhead", "optimizer": "optimizer",
          "compute": "compute"}


def largest_lever(json: dict) -> str:
    """The waterfall part that holds the most seconds of the step (what to attack first)."""
    bd = json["breakdown_s"]
    return max(bd, key=lambda k: bd[k])


def summary(rep: Any) -> str:
    """The terminal summary of a `perflab.audit.run.AuditReport`."""
    j = rep.json
    out = [f"audit of {rep.name} on {rep.device}"]
    out.append(f"time     step {seconds(j['step_s'])} (median; spread IQR/median {percent(j['step_s_spread'], 2)})"
               + (f", {num(j['tokens_per_s'])} tokens/s" if j["tokens_per_s"] else ", tokens/s n/a (no token count)")
               + (f", {num(rep.samples_per_s)} samples/s" if rep.samples_per_s else ""))
    six = j["flops_6n_per_step"]
    out.append(f"work     {num(float(j['flops_per_step']))} FLOPs per step counted by perflab's counter ({CONVENTION})")
    out.append("         by dtype: " + ", ".join(f"{d} {num(float(v))}" for d, v in j["flops_by_dtype"].items())
               + f"; hardware FLOPs {num(float(rep.hardware_flops_per_step))}")
    halved = j.get("flops_per_step_causal_halved")
    if halved is not None and halved != j["flops_per_step"]:
        out.append(f"         {num(float(halved))} FLOPs per step with {HALVED}; every other figure here, MFU "
                   "included, uses the dense count")
    for u in j.get("flops_uncounted") or []:
        t = seconds(u["time_s"]) if u["time_s"] is not None else "time not seen by the profiler"
        share = f" ({percent(u['time_s'] / j['step_s'])} of the step)" if u["time_s"] and j["step_s"] else ""
        out.append(f"         not counted: {u['name']}, {u['calls']} call(s), {t}{share}: the counter has no formula for it, "
                   "so the products it runs are missing from the count, MFU and the gap below")
    if six:
        out.append(f"         6N·tokens = {num(float(six))} (N = {j['params_active']:,} active parameters"
                   + (f" of {j['params_total']:,}" if j["params_active"] != j["params_total"] else "")
                   + f"); counted − 6N·T = {num(float(j['flops_per_step'] - six))}:")
        if getattr(rep, "six_n_how", ""):
            out.append(f"         ({rep.six_n_how})")
        for what, v in rep.flops_gap:
            out.append(f"           {num(float(v)):>10}  {what}")
    else:
        out.append(f"         6N·tokens n/a (no token count); parameters {j['params_total']:,}")
    peak = f"{num(j['peak_tflops'])} TFLOP/s" if j["peak_tflops"] else "peak unknown"
    out.append(f"MFU      {percent(j['mfu'])}   HFU {percent(j['hfu'])}   ({peak}; basis: {j['mfu_basis']})")
    bd = j["breakdown_s"]
    out.append("where    " + ", ".join(f"{LABELS[k]} {seconds(v)} ({percent(v / j['step_s'] if j['step_s'] else 0)})"
                                       for k, v in sorted(bd.items(), key=lambda kv: -kv[1])))
    out.append(f"         largest share: {LABELS[largest_lever(j)]}")
    if j["top_ops"]:
        out.append("top ops  name, calls, self time, achieved FLOP/s, bytes/s (tensor inputs + outputs), bound "
                   "(against the measured ceiling and copy bandwidth; –: not seen by the counting pass)")
        for r in j["top_ops"]:
            fl = "–" if r["flops_per_s"] is None else (f"{num(r['flops_per_s'] / 1e9)} GFLOP/s" if r["flops"]
                                                        else "no matmul FLOPs")
            by = "–" if r["bytes_per_s"] is None else f"{num(r['bytes_per_s'] / 1e9)} GB/s"
            out.append(f"         {r['name']}, {r['count']}, {seconds(r['self_s'])}, {fl}, {by}, {r['bound'] or '–'}")
    m = j["memory_bytes"]
    out.append(f"memory   peak {nbytes(m['peak'])}: weights {nbytes(m['weights'])}, grads {nbytes(m['grads'])}, "
               f"optimizer {nbytes(m['optimizer'])}, activations {nbytes(m['activations'])}"
               + (f"; lesson 03's estimate {nbytes(m['estimate'])}" if m["estimate"] else "; no estimate (shape not readable)"))
    for n in rep.memory_notes:
        out.append(f"         {n}")
    gb = j["graph_breaks"]
    if not rep.breaks_read:
        out.append("compiler graph breaks not read (skipped, or dynamo could not trace the loss)")
    else:
        out.append(f"compiler {len(gb)} graph break site(s)")
    for b in gb:
        out.append(f"         {b['where']}: {b['reason']}")
    e = j["energy_j_per_step"]
    if e is None:
        out.append(f"energy   {rep.energy_note}")
    else:
        per_tok = f", {num(e / rep.tokens_per_step)} J/token" if rep.tokens_per_step else ""
        out.append(f"energy   {num(e)} J/step{per_tok} ({rep.energy_note})")
    if j["recommendations"]:
        out.append("to try   (the capstone's rungs that apply, largest possible saving first)")
        for i, r in enumerate(j["recommendations"], 1):
            out.append(f"         {i}. {r['rung']}: {r['why']}")
    else:
        out.append("to try   no rung of the capstone applies to this step")
    for c in getattr(rep, "causes", []):
        out.append(f"cause    {c}")
    for n in rep.notes:
        out.append(f"note     {n}")
    return "\n".join(out)
