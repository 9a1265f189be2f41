"""The memory package's edges: the measuring subprocess's failures, the estimator's refusals, the
panel saying why a choice is predicted only, and byte read-outs."""

from __future__ import annotations

import re

import pytest

from perflab.core.errors import InputError
from perflab.memory import estimate as E
from perflab.memory import gpu, plots, probe


def test_measuring_child_returns_its_last_json_line_and_drops_unset_variables(monkeypatch):
    monkeypatch.setenv("PERFLAB_TEST_DROP", "1")
    out = gpu._run_child("import os, json\nprint('noise')\nprint(json.dumps({'v': os.environ.get('PERFLAB_TEST_DROP')}))",
                         env={"PERFLAB_TEST_DROP": None}, timeout=60)
    assert out == {"v": None}


def test_measuring_child_failures_carry_its_output():
    with pytest.raises(gpu.ChildError, match=r"(?s)failed \(exit 1\): .*ZeroDivisionError"):
        gpu._run_child("1 / 0", timeout=60)
    with pytest.raises(gpu.ChildError, match=re.escape("did not finish in 1 s; its output: 'started\\n'")):
        gpu._run_child("import time\nprint('started', flush=True)\ntime.sleep(30)", timeout=1)


@pytest.mark.parametrize("kw, words", [
    (dict(), "give --params N, a --preset, or --layers and --hidden"),
    (dict(params=1e9, batch=2, seq=128), "activations need --batch and --seq"),
    (dict(params=1e9, batch=2, seq=128, layers=2, hidden=64, heads=2, activation_model="perflab"),
     "activation model 'perflab' needs a preset"),
    (dict(params=1e9, batch=2, seq=128, layers=2, hidden=64, heads=2, activation_model="guess"),
     "activation model must be 'paper' or 'perflab' (got 'guess')"),
])
def test_estimate_refuses_what_it_cannot_predict(kw, words):
    with pytest.raises(InputError) as e:
        E.estimate(**kw)
    assert words in str(e.value)


def test_estimate_table_adds_a_total_row():
    est = E.estimate(1e9, precision="mixed", optimizer="adamw")
    t = est.table()
    assert list(t["component"])[-1] == "total" and t["bytes"].iloc[-1] == round(est.total_bytes)
    assert est.model_state_bytes == pytest.approx(est.total_bytes)  # no activations asked for


@pytest.mark.parametrize("kw, why", [
    (dict(measure=False), "measurement off"),
    (dict(optimizer="adafactor"), "prediction only (torch ships adamw, adamw-fused, sgd)"),
    (dict(zero=1, dp=2), "ZeRO/data parallelism needs several GPUs"),
    (dict(recompute="selective"), "selective recompute: prediction only"),
    (dict(model="gpt2-xl", batch=8, seq=1024), "too large to measure in a slider"),
])
def test_memory_panel_says_why_a_choice_is_predicted_only(kw, why):
    fig, _table = plots.memory_view(**{"model": "tiny-gpt", "batch": 2, "seq": 64, **kw}, device="cpu")
    assert why in fig.axes[0].get_title()


def test_byte_readouts_and_optimizer_refusal():
    from perflab.core.readout import binary_bytes

    assert binary_bytes(None) == "–" and binary_bytes(3 * 2**30) == "3 GiB (3.22 GB)"
    assert binary_bytes(2048) == "2 KiB" and binary_bytes(1536) == "1.5 KiB" and binary_bytes(-3 * 2**20) == "-3 MiB"
    assert binary_bytes(2**31, decimal_too=False) == "2 GiB" and binary_bytes(12) == "12 B"
    with pytest.raises(InputError, match="measured optimizers are adamw, adamw-fused, sgd \\(got 'lion'\\)"):
        probe.make_optimizer("lion", [])
