"""The `perflab swiglu` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

import pytest
from clirun import perflab


def test_swiglu_json_on_cpu(tmp_path):
    r = perflab("swiglu", "--hidden", "64", "--tokens", "32", "--radius", "8", "--dtype", "fp32", "--device", "cpu",
                "--rep-ms", "2", "--warmup-ms", "1", "--json", env={"PERFLAB_RESULTS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["baseline"] == 170 and d["hidden"] == 64 and d["tokens"] == 32
    c = d["candidates"]
    assert {x["d_ff"] for x in c} == {164, 168, 170, 172, 176}
    for x in c:
        assert {"d_ff", "tflops", "seconds", "params_delta"} <= set(x)
        assert x["params_delta"] == 3 * 64 * x["d_ff"] - 8 * 64 * 64
    assert [x["tflops"] for x in c] == sorted((x["tflops"] for x in c), reverse=True)
    assert d["saved"] is None and d["noise"] > 0 and d["rule"] and d["decision"]["kind"] in (
        "choose", "within the noise", "inconclusive")
    assert all("quietness" in x and x["status"] in ("ok", "confirmed", "unstable", "unconfirmed") for x in c)
    again = perflab("swiglu", "--hidden", "64", "--tokens", "32", "--radius", "8", "--dtype", "fp32", "--device", "cpu",
                    env={"PERFLAB_RESULTS": str(tmp_path)})
    assert again.returncode == 0 and "measurements served from results saved 20" in again.stdout, again.stdout
    fresh = perflab("swiglu", "--hidden", "64", "--tokens", "32", "--radius", "8", "--dtype", "fp32", "--device", "cpu",
                    "--rep-ms", "2", "--warmup-ms", "1", "--fresh", "--json", env={"PERFLAB_RESULTS": str(tmp_path)})
    assert fresh.returncode == 0 and json.loads(fresh.stdout)["saved"] is None, fresh.stderr


@pytest.mark.parametrize("args,needle", [(["--hidden", "0"], "≥ 1"), (["--hidden", "64", "--tokens", "-3"], "≥ 1"),
                                         (["--tokens", "8"], "required"),
                                         (["--hidden", "64", "--dtype", "fp8", "--device", "cpu"], "fp8")])
def test_swiglu_bad_input_one_line(args, needle):
    r = perflab("swiglu", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


def test_swiglu_lists_the_widths_that_failed(monkeypatch, tmp_path):
    from perflab.gemm import swiglu

    real = swiglu.measure_width

    def sometimes(tokens, h, d_ff, *a, **kw):
        if d_ff == 172:
            raise RuntimeError("no kernel for this width")
        return real(tokens, h, d_ff, *a, **kw)

    monkeypatch.setattr(swiglu, "measure_width", sometimes)
    r = perflab("swiglu", "--hidden", "64", "--tokens", "32", "--widths", "168", "172", "--dtype", "fp32", "--device",
                "cpu", "--rep-ms", "2", "--warmup-ms", "1", env={"PERFLAB_RESULTS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("1 width(s) failed: ") and "172" in last and "no kernel for this width" in last
