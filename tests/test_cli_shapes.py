"""`perflab waves`, `sizing`, `mamf`, `swiglu` and `reference` from the command line."""

import json
import os

import pytest
from clirun import perflab


def test_waves_json_reproduces_the_guide_example():
    """NVIDIA Matrix Multiplication Background guide §3.2: M=2304, K=4096, 256×128 tiles, 108 SMs."""
    r = perflab("waves", "--m", "2304", "--n", "1536", "--k", "4096", "--sms", "108", "--tile", "256x128", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["tiles"], d["waves"], d["utilization"]) == (108, 1, 1.0)
    assert d["arithmetic_intensity"] == pytest.approx(2 * 2304 * 1536 * 4096 / ((2304 * 4096 + 4096 * 1536 + 2304 * 1536) * 2))
    r = perflab("waves", "--m", "2304", "--n", "1664", "--k", "4096", "--gpu", "a100-sxm-80gb", "--json")
    d = json.loads(r.stdout)
    assert (d["tiles"], d["waves"], d["sms"]) == (117, 2, 108) and d["utilization"] == pytest.approx(117 / 216)
    assert d["roofline"]["bound"] == "compute-bound" and d["roofline"]["predicted_tflops"] == pytest.approx(312 * 117 / 216)
    assert d["alignment"]["arch"] == "ampere" and all(c["ok_recommended"] for c in d["alignment"]["checks"])


def test_waves_text_names_its_sources():
    r = perflab("waves", "--m", "4096", "--n", "10922", "--k", "4096", "--gpu", "h100-sxm", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    assert "132 SMs" in r.stdout and "10880 or 10944" in r.stdout and "FLOPs/byte" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--m", "0", "--n", "8", "--k", "8", "--sms", "4"], "≥ 1"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--tile", "0x128"], "≥ 1"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--tile", "big"], "256x128"),
    (["--m", "8", "--n", "8", "--k", "8", "--gpu", "tpu9"], "unknown GPU"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--dtype", "int3"], "unknown dtype"),
])
def test_waves_bad_input_one_line(args, needle):
    r = perflab("waves", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


def test_waves_without_a_gpu_asks_for_sms():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --sms defaults to its SM count")
    r = perflab("waves", "--m", "8", "--n", "8", "--k", "8")
    assert r.returncode == 2 and "--sms" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sizing_json():
    r = perflab("sizing", "--vocab", "50257", "--b", "8", "--s", "1024", "--h", "2560", "--a", "32", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    verdicts = {c["rule"]: c["verdict"] for c in d["checks"]}
    assert verdicts["vocab % 64 == 0"] == "FAIL" and verdicts["h/a divisible by 64"] == "FAIL"
    assert verdicts["b·s divisible by 64"] == "pass" and d["failed"] == 2


def test_mamf_json_on_cpu(tmp_path):
    env = {"PERFLAB_RESULTS": str(tmp_path)}
    args = ["mamf", "--m-range", "0", "96", "32", "--n-range", "32", "96", "32", "--k-range", "32", "64", "32",
            "--dtype", "fp32", "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--json"]
    r = perflab(*args, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    b = d["best"]
    assert {"m", "n", "k", "tflops", "mean", "median", "max"} <= set(b)
    assert b["m"] in (32, 64, 96) and b["k"] in (32, 64) and b["max"] >= b["median"] > 0
    assert d["grid_points"] == 18 and d["evaluated"] <= 18 and d["ranges"]["m"] == [32, 96, 3]
    assert d["ceiling_file"] and json.loads(open(d["ceiling_file"]).read())["fp32"]["best"]["tflops"] == b["tflops"]
    # resumable: the same command measures nothing new
    again = json.loads(perflab(*args, env=env).stdout)
    assert again["measured"] == 0 and again["best"] == b


@pytest.mark.parametrize("args,needle", [
    (["--m-range", "0", "96", "32"], "give all three ranges"),
    (["--m-range", "64", "32", "8", "--n-range", "8", "8", "8", "--k-range", "8", "8", "8"], "empty"),
    (["--m-range", "8", "8", "0", "--n-range", "8", "8", "8", "--k-range", "8", "8", "8"], "step"),
    (["--m-range", "8", "x", "8"], "whole number"),
    (["--dtype", "tf32", "--device", "cpu"], "fp32"),
    (["--m-range", "1000000", "1000000", "1", "--n-range", "1000000", "1000000", "1", "--k-range", "1000000",
      "1000000", "1", "--dtype", "fp32", "--device", "cpu"], "choose smaller"),
])
def test_mamf_bad_input_one_line(args, needle):
    r = perflab("mamf", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


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


@pytest.mark.parametrize("args,needle", [(["--hidden", "0"], "≥ 1"), (["--hidden", "64", "--tokens", "-3"], "≥ 1"),
                                         (["--tokens", "8"], "required"),
                                         (["--hidden", "64", "--dtype", "fp8", "--device", "cpu"], "fp8")])
def test_swiglu_bad_input_one_line(args, needle):
    r = perflab("swiglu", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


def test_reference_record_refuses_cpu_and_records_with_allow_cpu(tmp_path):
    import torch

    if not torch.cuda.is_available():
        r = perflab("reference", "record", "--what", "waves", "--smoke")
        assert r.returncode == 2 and "GPU" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    env = {"PERFLAB_RESULTS": str(tmp_path / "results")}
    r = perflab("reference", "record", "--what", "heads", "--smoke", "--allow-cpu", "--device", "cpu", "--out",
                str(tmp_path), "--json", env=env)
    assert r.returncode == 0, r.stderr
    path = json.loads(r.stdout)["written"][0]["file"]
    assert os.path.exists(path)
    listed = json.loads(perflab("reference", "list", "--out", str(tmp_path), "--json").stdout)["references"]
    assert [x["kind"] for x in listed] == ["heads"]
