"""The course's workload is a realistic untrained model: its loss starts at ln V and its gradients
are normal numbers (no denormals), for every preset small enough to build here."""

import math
import platform

import pytest
import torch

from perflab.core.denormals import (
    beside_reference,
    count_denormals,
    denormal_matmul_slowdown,
    flush_is_per_thread,
    penalty_verdict,
    per_thread_line,
    per_thread_rows,
    reference,
)
from perflab.core.errors import InputError
from perflab.workload.models import INIT_STD, PRESETS, build_model, param_count
from perflab.workload.train import make_batches, model_loss, next_token_loss

# presets of at most 200M parameters build and step in seconds here (gpt2-small: 124M)
SMALL = [name for name, cfg in PRESETS.items() if param_count(cfg) <= 200e6]


def test_small_presets_include_every_course_model():
    assert {"tiny-gpt", "tiny-llama", "small-gpt", "small-llama", "gpt2-small"} <= set(SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_untrained_loss_is_ln_v_and_gradients_are_normal(name):
    cfg = PRESETS[name]
    model = build_model(cfg)
    seq = min(cfg.seq_len, 64 if param_count(cfg) < 10e6 else 16)
    batch = make_batches(cfg, 2, seq)[0]
    loss = model_loss(model, batch)
    # a sanely initialised model predicts nearly uniformly: loss ≈ ln V (8.32 for V = 4096)
    assert abs(loss.item() - math.log(cfg.vocab)) < 0.5, (name, loss.item(), math.log(cfg.vocab))
    loss.backward()
    den = count_denormals(model.parameters(), grads=True)
    assert den.total == param_count(cfg)
    assert den.fraction <= 1e-3, (name, den)


def test_init_follows_gpt2():
    """Radford et al. 2019 §2.3 and the GPT-2 code: N(0, 0.02) weights and embeddings, residual
    projections scaled by 1/√(2·L) (2 residual layers per block), zero biases."""
    cfg = PRESETS["small-gpt"]
    m = build_model(cfg)
    assert m.embed.weight.std().item() == pytest.approx(INIT_STD, rel=0.02)
    assert m.blocks[0].attn.q.weight.std().item() == pytest.approx(0.02, rel=0.05)
    resid = torch.cat([b.mlp.down.weight.flatten() for b in m.blocks])
    assert resid.std().item() == pytest.approx(0.02 / math.sqrt(2 * cfg.layers), rel=0.05)
    assert all(float(b.attn.q.bias.detach().abs().max()) == 0 for b in m.blocks)


def test_one_loss_is_next_token_cross_entropy():
    cfg = PRESETS["tiny-gpt"]
    m = build_model(cfg)
    inputs, targets = make_batches(cfg, 2, 16)[0]
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the inputs shifted by one
    logits = m(inputs)
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
    assert model_loss(m, (inputs, targets)).item() == pytest.approx(want.item(), rel=1e-6)
    assert next_token_loss(logits, targets).item() == pytest.approx(want.item(), rel=1e-6)


def test_counting_denormals():
    t = torch.tensor([0.0, 1.0, 1e-39, -1e-40, 1e-30])
    d = count_denormals([t])
    assert (d.denormal, d.total) == (2, 5) and d.fraction == pytest.approx(0.4)


def test_penalty_verdict_reads_both_kinds_of_cpu():
    def rows(slow, flushed):
        return [{"threads": 1, "flush_denormal": False, "slowdown": slow},
                {"threads": 1, "flush_denormal": True, "slowdown": flushed}]

    paying = penalty_verdict(rows(40.0, 1.0))
    assert paying["pays"] and paying["flush_fixes"] and "40x slower" in paying["line"]
    unfixed = penalty_verdict(rows(40.0, 38.0))
    assert unfixed["pays"] and not unfixed["flush_fixes"] and "still 38.0x" in unfixed["line"]
    free = penalty_verdict(rows(1.1, 0.9))
    assert not free["pays"] and "full speed" in free["line"]
    with pytest.raises(InputError, match="1-thread rows"):
        penalty_verdict([{"threads": 2, "flush_denormal": False, "slowdown": 40.0}])


def test_reference_cpu_pays_and_its_flush_is_per_thread():
    # The Intel Xeon figures of the degenerate-step report (data/denormal_reference.json):
    # 31 ms vs 0.43 ms on 1 thread, fixed by flushing; 17.6 vs 0.44 ms on 2 threads, not fixed.
    ref = reference()
    by = {(r["threads"], r["flush_denormal"]): r["slowdown"] for r in ref["rows"]}
    assert by[(1, False)] == pytest.approx(31.0 / 0.43) and by[(1, True)] == pytest.approx(1.0)
    assert by[(2, False)] == pytest.approx(17.6 / 0.44) and by[(2, True)] > by[(2, False)] * 0.9
    assert penalty_verdict(ref["rows"])["flush_fixes"]
    assert ref["source"] and ref["step"]["degenerate_fwd_bwd_s"] / ref["step"]["sane_fwd_bwd_s"] > 30


def test_denormal_matmul_is_measured_with_its_operands_counted():
    before = torch.get_num_threads()
    rows = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    assert torch.get_num_threads() == before  # restored
    assert [(r["threads"], r["flush_denormal"]) for r in rows] == [(1, False), (1, True)]
    assert all(r["denormal_inputs"] == int(128 * (1 / 3)) * 128 for r in rows)  # a third of A's rows
    assert all(r["normal_ms"] > 0 and r["denormal_ms"] > 0 for r in rows)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the denormal slowdown is an x86 CPU's")
def test_where_the_cpu_pays_flushing_fixes_it_on_the_calling_thread_only():
    rows = denormal_matmul_slowdown(128, threads=[1], rep_ms=15, warmup_ms=3)
    verdict = penalty_verdict(rows)
    if not verdict["pays"]:
        pytest.skip(verdict["line"])  # e.g. AMD Zen 3: denormal FMAs at full speed, nothing to fix
    assert verdict["flush_fixes"], verdict
    per = flush_is_per_thread(128, rep_ms=15, warmup_ms=3)
    assert per["ratio"] > 3, per  # the thread that did not set the flag stays slow, relative to its own normal time


def _cli_json(*args):
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "perflab", *args, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_mfu_and_memory_measure_the_same_realistic_step():
    """Both commands train small-gpt (V = 4096) for real: loss near ln 4096 = 8.32, and the same
    forward+backward within 2× (memory --measure also tracks every allocation)."""
    mfu = _cli_json("mfu", "--measure", "--preset", "small-gpt", "--batch", "2", "--steps", "3")
    mem = _cli_json("memory", "--measure", "--preset", "small-gpt", "--batch", "2")
    for d in (mfu, mem):
        assert abs(d["loss"] - math.log(4096)) < 0.5, d["loss"]
    a, b = mfu["forward_s"] + mfu["backward_s"], mem["forward_s"] + mem["backward_s"]
    assert 0.5 < a / b < 2, (a, b)
    assert mem["step_s"] > 0 and mem["peak_bytes"] == mem["predicted_peak_bytes"]


def test_memory_measure_needs_a_preset_and_says_so():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "perflab", "memory", "--measure", "--params", "1e6"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--measure needs --preset" in r.stderr and "Traceback" not in r.stderr


def test_this_machine_beside_the_recorded_cpu_and_the_per_thread_readout():
    rows = [{"threads": 1, "flush_denormal": False, "slowdown": 1.04}, {"threads": 1, "flush_denormal": True, "slowdown": 0.98}]
    table = beside_reference(rows)
    assert [(r["threads"], r["flush_denormal"]) for r in table] == [(1, False), (1, True), (2, False), (2, True)]
    assert table[0]["recorded slowdown"] == pytest.approx(72.1) and table[0]["slowdown here"] == "1.0"
    assert table[2]["slowdown here"].startswith("not measured")  # no 2-thread row measured here
    per = {"caller_normal_ms": 0.4, "caller_ms": 0.4, "other_normal_ms": 0.4, "other_thread_ms": 16.0,
           "caller_slowdown": 1.0, "other_slowdown": 40.0, "ratio": 40.0}
    assert [r["slowdown"] for r in per_thread_rows(per)] == [1.0, 40.0]
    assert "40.0x as slowed down" in per_thread_line(per, penalty_verdict([{**r, "slowdown": 40.0} if not r["flush_denormal"]
                                                                            else r for r in rows]))
    assert "nothing to show here" in per_thread_line(per, penalty_verdict(rows))
