"""--try: each rung measured on the learner's step with loss parity; HFU counts recompute; energy says why not."""

import pytest
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
                             recommend.Applicable("batch", "launch overhead")],
                            {"optimizer": 0.01, "launch_overhead": 0.002})
    assert [r.rung for r in rows] == ["adamw", "batch"]  # the larger part first
    assert [r.can_save_s for r in rows] == [0.01, 0.002]
    recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    adamw, batch = rows
    assert adamw.parity_ok is True and adamw.measured_speedup > 0 and "tried" in adamw.why
    assert adamw.verdict in ("keep it", "not kept", "inconclusive") and adamw.quietness is not None
    assert set(adamw.to_json()) == {"rung", "why", "measured_speedup", "parity_ok", "quietness", "verdict"}
    assert batch.measured_speedup is None and "not measured" in batch.why
    assert set(batch.to_json()) == {"rung", "why", "measured_speedup", "parity_ok"}  # never tried: no verdict
    assert all(torch.equal(v, init[k]) for k, v in t.model.state_dict().items())


@pytest.mark.usefixtures("watch_all_cores")
def test_a_rung_tried_while_the_machine_was_busy_is_neither_kept_nor_dropped():
    from perflab.core.quietness import MadeUpLoad, injected

    t = target_from(F.item_in_forward(), "syncing")
    init = {k: v.clone() for k, v in t.model.state_dict().items()}
    opt = torch.optim.AdamW(t.model.parameters())
    rows = recommend.ranked([recommend.Applicable("adamw", "for-loop AdamW")], {"optimizer": 0.01})
    with injected(MadeUpLoad(0.6, tick_s=1e-4)):
        recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    (adamw,) = rows
    assert adamw.verdict == "inconclusive" and adamw.to_json()["quietness"]["verdict"] == "disturbed"
    assert "inconclusive: the machine was busy (other programs used 60 % of" in adamw.why
    assert "keep it" not in adamw.why and "not kept" not in adamw.why
    rows = recommend.ranked([recommend.Applicable("adamw", "for-loop AdamW")], {"optimizer": 0.01})
    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        recommend.try_rungs(rows, t, init, opt, default_loss, t.batches[:3], torch.device("cpu"))
    assert rows[0].verdict in ("keep it", "not kept") and rows[0].quietness and rows[0].quietness.verdict == "quiet"


def test_hfu_counts_the_recompute_of_checkpointing():
    rep = run_audit(target_from(F.checkpointed(), "checkpointed"), device="cpu", steps=2, explain_breaks=False)
    # the first product (16→64) runs again in the backward: 2·8·16·64 hardware FLOPs more than model FLOPs
    assert sum(rep.work.flops_by_dtype.values()) - rep.work.flops_per_step == 2 * 8 * 16 * 64
    assert rep.utilization.hfu > rep.utilization.mfu


def test_no_energy_counter_is_said_in_one_line():
    m = EnergyMeter(torch.device("mps"))
    m.start()
    assert m.stop() is None and m.reason.startswith("energy not measurable") and "\n" not in m.reason


def test_sdpa_is_recommended_only_to_a_model_that_supports_it():
    """Gemma2's attention soft-caps its scores, which SDPA cannot do: transformers marks it
    `_supports_sdpa = False`, so the rung is not offered though its attention is written out."""
    import pytest

    pytest.importorskip("transformers")
    from perflab.audit.target import from_hf_config

    small = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64, "max_position_embeddings": 32}
    rungs = {}
    for kind in ("gemma2", "llama"):
        t = from_hf_config(kind, {**small, "attn_implementation": "eager"}, batch=1, seq=8)
        assert t.model.config._attn_implementation == "eager"
        opt = torch.optim.AdamW(t.model.parameters(), foreach=True)
        rungs[kind] = [a.rung for a in recommend.applicable(t, opt, torch.device("cpu"), dtypes=["fp32"],
                                                             breakdown={"compute": 1.0}, step_s=1.0)]
    assert "sdpa" not in rungs["gemma2"] and "sdpa" in rungs["llama"]


def test_a_rung_acts_on_the_waterfall_categories_and_says_them_by_their_labels():
    """compile acts on launch overhead and compute (perflab.tune.levers), read as lesson 11's categories:
    its rank is their seconds, and its why names them as the waterfall labels them."""
    assert recommend.acts_on("compile") == ("launch_overhead", "compute")
    assert recommend.acts_on("loader") == ("data_wait",) and recommend.acts_on("not-a-rung") == ("compute",)
    bd = {"compute": 0.003, "data_wait": 0.004, "host_sync": 0.0, "launch_overhead": 0.002, "optimizer": 0.0}
    rows = recommend.ranked([recommend.Applicable("loader", "reads in the loop"),
                             recommend.Applicable("compile", "eager")], bd)
    assert [(r.rung, r.can_save_s) for r in rows] == [("compile", pytest.approx(0.005)), ("loader", 0.004)]
    assert "acts on launch overhead + compute, 5 ms of the step" in rows[0].why


def test_batch_is_recommended_when_launch_overhead_is_a_large_share():
    t = target_from(F.item_in_forward(), "syncing")
    opt = torch.optim.AdamW(t.model.parameters(), foreach=True)
    names = [a.rung for a in recommend.applicable(t, opt, torch.device("cpu"), dtypes=["fp32"], step_s=1.0,
                                                  breakdown={"compute": 0.8, "launch_overhead": 0.2})]
    assert "batch" in names
    names = [a.rung for a in recommend.applicable(t, opt, torch.device("cpu"), dtypes=["fp32"], step_s=1.0,
                                                  breakdown={"compute": 0.95, "launch_overhead": 0.05})]
    assert "batch" not in names
