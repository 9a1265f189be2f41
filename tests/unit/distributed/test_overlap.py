"""Tests of `perflab.distributed.overlap`."""

from __future__ import annotations

import json
import subprocess
import sys

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from perflab.core.errors import InputError  # noqa: E402
from perflab.distributed import overlap as O  # noqa: E402

matplotlib.use("Agg")


# The playbook's own setting of the widget it describes: H100 bf16 dense peak and NVLink per direction
FLOPS, BW = 989.4e12, 450e9


HW = O.Hardware(989.4, 450.0)


h, s, b, DP, TP, L, L_NEXT = 8192, 4096, 1, 8, 8, 32, 4


# ----------------------------------------------------------------------------- overlap
def test_overlap_hardware_from_numbers_and_its_errors():
    hw = O.hardware(None, None, peak_tflops=100, link_gbps=50)
    assert (hw.peak_flops, hw.bw_bytes_per_s) == (100e12, 50e9)
    assert hw.label == "100 TFLOP/s, 50 GB/s"
    with pytest.raises(InputError, match="give an accelerator id"):
        O.hardware(None, "nvlink4-h100")
    with pytest.raises(InputError, match="no dense bf16 peak"):
        O.hardware("v100-sxm2-16gb", "nvlink4-h100")
    with pytest.raises(InputError, match="give a link id"):
        O.hardware("h100-sxm", None)
    with pytest.raises(InputError, match="link_gbps must be a positive number"):
        O.hardware("h100-sxm", None, link_gbps=-1)


def test_overlap_plot_on_given_axes():
    hw = O.hardware("h100-sxm", "nvlink4-h100")
    res = O.all_four(8192, 80, 4096, 1, 8, 8, 10, hw)
    fig, ax = plt.subplots()
    assert O.plot(res, title="t", ax=ax) is fig
    assert len(ax.patches) == 2 * len(res)


def test_zero3_matches_playbook():
    o = O.zero3(h, s, b, DP, HW, bytes_per_element=1)
    # t_comm = 16h² · (DP−1)/(DP·peak_bw);  t_compute = 32·seq·mbs·h² / peak_flops
    assert o.t_comm_s == pytest.approx(16 * h**2 * (DP - 1) / (DP * BW))
    assert o.t_compute_s == pytest.approx(32 * s * b * h**2 / FLOPS)
    # ratio = 1/(2·seq·mbs) · (DP−1)/DP · peak_flops/peak_bw
    assert o.ratio == pytest.approx(1 / (2 * s * b) * (DP - 1) / DP * FLOPS / BW)
    assert o.ratio == pytest.approx(0.234843, rel=1e-5)  # 0.875 · 2198.67 / 8192, by hand
    assert o.ratio == pytest.approx(o.ratio_closed_form)


def test_tp_matches_playbook():
    o = O.tp(h, s, b, TP, HW, bytes_per_element=1)
    assert o.t_comm_s == pytest.approx(s * b * h * (TP - 1) / (TP * BW))
    assert o.t_compute_s == pytest.approx(2 * s * b * h**2 / (TP * FLOPS))
    assert o.ratio == pytest.approx((TP - 1) / (2 * h) * FLOPS / BW)
    assert o.ratio == pytest.approx(0.939372, rel=1e-5)
    assert o.hidden  # just below 1 when elements are counted as bytes ...
    assert not O.tp(h, s, b, TP, HW, bytes_per_element=2).hidden  # ... and above it for 2-byte bf16


def test_pp_matches_playbook():
    o = O.pp(h, s, b, L_NEXT, HW, bytes_per_element=1)
    assert o.t_comm_s == pytest.approx(s * b * h / BW)
    assert o.t_compute_s == pytest.approx(32 * s * b * h**2 * L_NEXT / FLOPS)
    assert o.ratio == pytest.approx(FLOPS / (32 * h * L_NEXT * BW))
    assert o.ratio == pytest.approx(0.00209681, rel=1e-5)


def test_dp_from_the_playbooks_times_and_its_printed_erratum():
    o = O.dp(h, L, s, b, DP, HW, bytes_per_element=1)
    num_params, num_tokens = L * 16 * h**2, s * b
    # t_compute = 4 · num_tokens · num_params / peak_flops (the whole backward pass)
    assert o.t_compute_s == pytest.approx(4 * num_tokens * num_params / FLOPS)
    # all gradients all-reduced: the bucket formula bucket·2(DP−1)/(DP·peak_bw) applied to every bucket
    assert o.t_comm_s == pytest.approx(num_params * 2 * (DP - 1) / (DP * BW))
    # the same ratio per bucket: one 25 MB bucket against the backward of its parameters
    bucket = O.dp_bucket(25 * 2**20, s, b, DP, HW, bytes_per_element=1)
    assert bucket.t_comm_s == pytest.approx(25 * 2**20 * 2 * (DP - 1) / (DP * BW))
    assert bucket.ratio == pytest.approx(o.ratio)
    # the printed ratio carries a spurious num_params factor: num_params/(2·num_tokens)·(DP−1)/DP·flops/bw
    printed = num_params / (2 * num_tokens) * (DP - 1) / DP * FLOPS / BW
    assert o.ratio == pytest.approx(printed / num_params)
    assert o.ratio == pytest.approx(o.ratio_closed_form)


def test_bytes_per_element_scales_communication_only():
    for fn, args in ((O.dp, (h, L, s, b, DP)), (O.zero3, (h, s, b, DP)), (O.tp, (h, s, b, TP)), (O.pp, (h, s, b, L_NEXT))):
        one, two = fn(*args, HW, bytes_per_element=1), fn(*args, HW, bytes_per_element=2)
        assert two.t_comm_s == pytest.approx(2 * one.t_comm_s) and two.t_compute_s == one.t_compute_s
        assert two.ratio == pytest.approx(two.ratio_closed_form)


def test_what_each_ratio_does_not_depend_on():
    # TP and PP: independent of sequence length and batch; ZeRO-3: of h; DP: of h and L
    assert O.tp(h, 1024, 1, TP, HW).ratio == pytest.approx(O.tp(h, 8192, 4, TP, HW).ratio)
    assert O.pp(h, 1024, 1, L_NEXT, HW).ratio == pytest.approx(O.pp(h, 8192, 4, L_NEXT, HW).ratio)
    assert O.zero3(1024, s, b, DP, HW).ratio == pytest.approx(O.zero3(16384, s, b, DP, HW).ratio)
    assert O.dp(1024, 8, s, b, DP, HW).ratio == pytest.approx(O.dp(16384, 96, s, b, DP, HW).ratio)
    assert O.dp(h, L, s, b, 1, HW).ratio == 0.0  # one rank: nothing to all-reduce


def test_thresholds_are_where_the_ratio_is_one():
    tokens = O.min_tokens_dp(DP, HW)
    assert O.dp(h, L, int(round(tokens)), 1, DP, HW).ratio == pytest.approx(1.0, rel=1e-3)
    hmin = O.min_hidden_tp(TP, HW)
    assert O.tp(int(round(hmin)), s, b, TP, HW).ratio == pytest.approx(1.0, rel=1e-3)


def test_hardware_from_tables():
    hw = O.hardware("h100-sxm", "nvlink4-h100")
    assert hw.peak_tflops == 989.4 and hw.link_gbps == 450
    assert O.hardware("a100-sxm-80gb", "ib-ndr-400").link_gbps == 50
    for lk in O.links():
        assert lk.source.startswith(("NVIDIA", "https")) and lk.per_direction_gbps > 0 and lk.derivation
    with pytest.raises(InputError, match="unknown link"):
        O.hardware("h100-sxm", "carrier-pigeon")
    with pytest.raises(InputError, match="unknown accelerator"):
        O.hardware("tpu-v9", "nvlink4-h100")


@pytest.mark.parametrize("call,needle", [
    (lambda: O.tp(0, s, b, TP, HW), "h must be ≥ 1"),
    (lambda: O.zero3(h, s, b, DP, HW, bytes_per_element=3), "bytes_per_element"),
    (lambda: O.pp(h, s, -1, L_NEXT, HW), "mbs must be ≥ 1"),
])
def test_bad_input(call, needle):
    with pytest.raises(InputError, match=needle):
        call()


def test_explore_returns_figure_and_table():
    fig, table = O.explore(h=4096, layers=32, seq=2048, mbs=2, dp_degree=4, tp_degree=4, pp_layers=2)
    assert list(table.index) == ["DP", "ZeRO-3", "TP", "PP"]
    assert "ms" in fig.axes[0].get_xlabel()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_cli_json():
    r = subprocess.run([sys.executable, "-m", "perflab", "overlap", "--json", "--h", "8192", "--seq", "4096", "--tp", "8",
                        "--bytes-per-element", "1", "--link", "nvlink4-h100"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    tp = next(x for x in d["strategies"] if x["strategy"] == "TP")
    assert tp["ratio"] == pytest.approx(0.939372, rel=1e-5) and tp["hidden"] is True
    assert {x["strategy"] for x in d["strategies"]} == {"DP", "ZeRO-3", "TP", "PP"}


def test_cli_bad_argument_one_line():
    r = subprocess.run([sys.executable, "-m", "perflab", "overlap", "--link", "smoke-signals"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "unknown link" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_two_links_side_by_side_and_their_thresholds():
    shape = dict(h=8192, layers=80, seq=4096, mbs=1, dp_degree=8, tp_degree=8, pp_layers=4)
    c = O.compare_links(shape)
    t = c.table()
    assert list(t.columns) == ["NVLink 450 GB/s", "IB NDR 50 GB/s", "closed form"] and list(t.index) == list(O.STRATEGIES)
    assert t.loc["TP", "NVLink 450 GB/s"] == "1.88" and t.loc["PP", "IB NDR 50 GB/s"] == "0.0377"
    assert c.thresholds() == ("DP hides its all-reduce once each rank processes ≥ 17,314 tokens per step over IB NDR "
                              "(≥ 1,924 over NVLink); TP hides its all-gather only for h ≥ 15,391 even on NVLink.")
    import matplotlib.pyplot as plt

    plt.close(c.figure())


def test_this_machines_ratios_or_why_not():
    none = O.on_this_machine(None, "unknown", 1.2, "cpu", 2)
    assert none.here is None and "nothing to compute" in none.text() and none.table() is None
    nv = O.hardware("h100-sxm", "nvlink4-h100")
    here = O.on_this_machine(0.333, "estimate", 1.17, "cpu", 2, references={"H100 over NVLink": nv})
    assert here.text() == ("this machine: 0.333 TFLOP/s (estimate) over 1.17 GB/s = 285 FLOPs per byte; "
                           "H100 over NVLink: 2,199")
    t = here.table()
    assert t is not None and list(t.columns) == ["t_comm / t_compute", "hidden?"]
