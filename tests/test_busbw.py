"""algbw/busbw follow nccl-tests exactly.

Reference: NVIDIA/nccl-tests, doc/PERFORMANCE.md ("Summary": AllReduce 2(n-1)/n; ReduceScatter,
AllGather, AlltoAll (n-1)/n; Broadcast, Reduce 1) and each test's `*GetBw` in src/*.cu, which
also fix the meaning of the size S (e.g. all_gather.cu: baseBw = count·typesize·nranks / sec with
count the per-rank count, i.e. S = the gathered output; gather.cu, scatter.cu: (n-1)/n;
sendrecv.cu: 1).
"""

import json
import subprocess
import sys

import pytest

from perflab.core.errors import InputError
from perflab.distributed import busbw as B


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64])
def test_factors_match_nccl_tests(n):
    # doc/PERFORMANCE.md, section "Summary"
    assert B.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        assert B.bus_factor(op, n) == pytest.approx((n - 1) / n), op
    for op in ("broadcast", "reduce", "send_recv"):
        assert B.bus_factor(op, n) == 1.0, op


def test_published_nccl_tests_rows_reproduced():
    # NVIDIA/nccl-tests issue #232: all_reduce_perf, 2 ranks (one H100 per node, -np 2 -g 1):
    #   33554432 B, 812.3 us -> algbw 41.31, busbw 41.31 GB/s (factor 2(n-1)/n = 1 for n = 2)
    d = B.convert("all_reduce", 33554432, 812.3e-6, 2)
    assert round(d["algbw_gbps"], 2) == 41.31 and round(d["busbw_gbps"], 2) == 41.31
    # kvcache-ai/Mooncake PR #3484 (an 8-GPU all_reduce_perf run): 33554432 B, 195.40 us ->
    #   algbw 171.72, busbw 300.51 GB/s; 300.51 / 171.72 = 1.75 = 2·7/8, the factor for 8 ranks
    d = B.convert("all_reduce", 33554432, 195.40e-6, 8)
    assert round(d["algbw_gbps"], 2) == 171.72 and round(d["busbw_gbps"], 2) == 300.51


def test_convert_units_and_fields():
    d = B.convert("AllGather", 2**30, 0.5, 4)
    assert d["op"] == "all_gather" and d["factor"] == 0.75
    assert d["algbw_gbps"] == pytest.approx(2**30 / 0.5 / 1e9)
    assert d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * 0.75)
    assert "gathered output" in d["size_means"]


@pytest.mark.parametrize("name,want", [("allreduce", "all_reduce"), ("All-Reduce", "all_reduce"),
                                       ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
                                       ("bcast", "broadcast"), ("sendrecv", "send_recv")])
def test_op_names(name, want):
    assert B.normalize_op(name) == want


@pytest.mark.parametrize("call,needle", [
    (lambda: B.normalize_op("allsum"), "unknown collective"),
    (lambda: B.convert("all_reduce", 0, 1.0, 2), "bytes must be > 0"),
    (lambda: B.convert("all_reduce", 10, 0.0, 2), "seconds must be"),
    (lambda: B.convert("all_reduce", 10, 1.0, 1), "at least 2 ranks"),
    (lambda: B.check_size("all_gather", 1000, 3), "try 996 or 1008"),
    (lambda: B.check_size("all_reduce", 1001, 3), "multiple of 4 B"),
    (lambda: B.parse_size("12 parsecs"), "not understood"),
    (lambda: B.parse_size("0"), "≥ 1 byte"),
])
def test_bad_input_one_line(call, needle):
    with pytest.raises(InputError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_sizes():
    assert B.parse_size("64K") == 65536 and B.parse_size("1M") == 2**20 and B.parse_size("4096") == 4096
    sizes = B.default_sizes("all_gather", 3)
    assert all(s % 12 == 0 for s in sizes) and sizes == sorted(sizes)
    assert B.size_label(3 * 2**20) == "3 MiB"


def test_factor_table_lists_every_op():
    t = B.factor_table()
    assert list(t.index) == list(B.OPS) and t.loc["all_reduce", "n=8"] == 1.75


def test_cli_convert_json():
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", "--op", "reduce_scatter", "--bytes", "1048576",
                        "--seconds", "0.001", "--ranks", "4", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["algbw_gbps"] == pytest.approx(1.048576) and d["busbw_gbps"] == pytest.approx(1.048576 * 0.75)


@pytest.mark.parametrize("args,needle", [
    (["--bytes", "100", "--seconds", "1"], "all three"),
    (["--op", "nope", "--bytes", "1", "--seconds", "1", "--ranks", "2"], "unknown collective"),
    (["--op", "all_gather", "--nproc", "3", "--sizes", "1000"], "try 996 or 1008"),
    (["--bytes", "0", "--seconds", "1", "--ranks", "2"], "≥ 1"),
])
def test_cli_bad_arguments(args, needle):
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_measures_on_cpu():
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", "--op", "all_reduce", "--nproc", "2", "--backend", "gloo",
                        "--sizes", "4K", "256K", "--budget-s", "0.05", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and [row["bytes"] for row in d["rows"]] == [4096, 262144]
    for row in d["rows"]:
        assert row["correct"] and row["seconds"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.0)  # 2(n-1)/n = 1 for n = 2


@pytest.mark.slow
def test_sweep_records_and_resumes():
    first = B.measure_sweep("all_gather", 2, ["8K", "64K"], backend="gloo", name="test_busbw_resume", budget_s=0.05,
                            progress=False)
    assert first.launch is not None and first.launch.ok
    assert [r["status"] for r in first.rows] == ["ok", "ok"]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 0.5) for r in first.rows)
    again = B.measure_sweep("all_gather", 2, ["8K", "64K"], backend="gloo", name="test_busbw_resume", progress=False)
    assert again.launch is None and again.sweep.skipped == 2  # nothing launched: every point was recorded
    assert [r["seconds"] for r in again.rows] == [r["seconds"] for r in first.rows]
    fig = B.plot(again.rows, title="t")
    assert "bytes" in fig.axes[0].get_xlabel() and "GB/s" in fig.axes[0].get_ylabel()
