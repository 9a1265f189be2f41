"""A scripted careful hunter: reads the instruments' evidence, claims only what an instrument shows,
biggest share first (the same rules as labs/solutions/14_regression_hunt.ipynb)."""


def careful(ev):
    c, s, ops = ev["counters"], ev["shares"], ev["op_calls"]
    found = []  # (share of the step it explains, claim)
    if c["gen2_per_step"] >= 0.5:
        found.append((s["other"], ("gc_full_collections", f"{c['gen2_per_step']:.2g} gen-2 collections per step",
                                   "no_gc_in_step")))
    if c["threads"] > c["usable_cores"]:
        found.append((s["forward"] + s["backward"], ("threads_oversubscribed",
                                                     f"{c['threads']} threads on {c['usable_cores']} cores",
                                                     "threads_match_cores")))
    if c["loader_workers"] == 0:
        found.append((s["data"], ("data_loader_workers", "no DataLoader workers; the data wait is every step",
                                  "loader_workers")))
    elif c["worker_starts_per_epoch"] > 0:
        found.append((s["data"], ("persistent_workers", f"{c['worker_starts_per_epoch']:.2g} worker starts per epoch",
                                  "persistent_workers")))
    if ops.get("aten::isfinite", 0) > 0:
        found.append((s["forward"], ("host_sync_logging", "aten::isfinite and aten::item per layer in the forward",
                                     "log_on_device")))
    if ops.get("aten::_foreach_norm", 0) == 0:
        found.append((s["clip"], ("grad_clip_per_tensor", "no aten::_foreach_norm; one norm and item per tensor",
                                  "clip_foreach")))
    if ops.get("aten::_foreach_addcdiv_", 0) == 0:
        found.append((s["optimizer"], ("optimizer_for_loop", "no aten::_foreach_ ops in the optimizer",
                                       "adamw_foreach")))
    if ops.get("aten::masked_fill", 0) > 0:
        found.append((s["forward"], ("attention_written_out", "aten::masked_fill and aten::softmax in the forward",
                                     "use_sdpa")))
    return [claim for _share, claim in sorted(found, key=lambda t: -t[0])]


def claim_everything(ev):
    from perflab.hunt.pool import CATEGORIES, POOL

    fix = {r.category: r.fix for r in POOL}
    return [(cat, "it might be this one", fix.get(cat, "loader_workers")) for cat in CATEGORIES]
