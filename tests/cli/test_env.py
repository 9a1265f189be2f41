"""The `perflab env` command: its output, its JSON, and one line for bad input."""

import json

from clirun import perflab


def test_env_json_schema():
    r = perflab("env", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert isinstance(d["device"], dict) and d["device"]["name"]
    assert set(d["peak_tflops"]) >= {"fp32", "tf32", "bf16", "fp16", "fp8"}
    assert all(v is None or isinstance(v, (int, float)) for v in d["peak_tflops"].values())
    if d["device"]["kind"] == "cpu" and d["peak_source"] == "estimate":
        assert d["peak_inputs"]["cores"] >= 1 and d["peak_inputs"]["clock_ghz"] > 0


def test_env_text():
    r = perflab("env", fresh=True)  # the real `python -m perflab` entry point, once
    assert r.returncode == 0 and "peak TFLOP/s" in r.stdout
