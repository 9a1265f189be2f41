"""--try: each rung measured on the learner's step with loss parity; HFU counts recompute; energy says why not."""

import torch

from perflab.audit import recommend
from perflab.audit.energy import EnergyMeter
from perflab.audit.run import run_audit
from perflab.audit.target import default_loss, target_from

from . import factories as F


def test_try_measures_rungs_with_parity_and_restores_the_weights():
    t = target_from(F.item_in_forward(), "syncing")
    init = {k: v.clone() for k, v in t.model.state_dict().items()}
    opt = torch.optim.AdamW(t.model.parameters())
    rows = recommend.ranked([recommend.Applicable("adamw", "for-loop AdamW"),
                             recommend.Applicable("batch", "launch overhead")], {"optimizer": 0.01, "launch": 0.002})
    assert [r["rung"] for r in rows] == ["adamw", "batch"]  # the larger part first
    recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    adamw, batch = rows
    assert adamw["parity_ok"] is True and adamw["measured_speedup"] > 0 and "tried" in adamw["why"]
    assert batch["measured_speedup"] is None and "not measured" in batch["why"]
    assert all(torch.equal(v, init[k]) for k, v in t.model.state_dict().items())


def test_a_rung_tried_while_the_machine_was_busy_is_neither_kept_nor_dropped():
    from perflab.core.quietness import MadeUpLoad, injected

    t = target_from(F.item_in_forward(), "syncing")
    init = {k: v.clone() for k, v in t.model.state_dict().items()}
    opt = torch.optim.AdamW(t.model.parameters())
    rows = recommend.ranked([recommend.Applicable("adamw", "for-loop AdamW")], {"optimizer": 0.01})
    with injected(MadeUpLoad(0.6, tick_s=1e-4)):
        recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    (adamw,) = rows
    assert adamw["verdict"] == "inconclusive" and adamw["quietness"]["verdict"] == "disturbed"
    assert "inconclusive: the machine was busy (other programs used 60 % of" in adamw["why"]
    assert "keep it" not in adamw["why"] and "not kept" not in adamw["why"]
    rows = recommend.ranked([recommend.Applicable("adamw", "for-loop AdamW")], {"optimizer": 0.01})
    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    assert rows[0]["verdict"] in ("keep it", "not kept") and rows[0]["quietness"]["verdict"] == "quiet"


def test_hfu_counts_the_recompute_of_checkpointing():
    j = run_audit(target_from(F.checkpointed(), "checkpointed"), device="cpu", steps=2, explain_breaks=False).json
    # the first product (16→64) runs again in the backward: 2·8·16·64 hardware FLOPs more than model FLOPs
    assert sum(j["flops_by_dtype"].values()) - j["flops_per_step"] == 2 * 8 * 16 * 64
    assert j["hfu"] > j["mfu"]


def test_no_energy_counter_is_said_in_one_line():
    m = EnergyMeter(torch.device("mps"))
    m.start()
    assert m.stop() is None and m.reason.startswith("energy not measurable") and "\n" not in m.reason
