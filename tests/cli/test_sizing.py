"""The `perflab sizing` command: its output, its JSON, and one line for bad input."""

import json

from clirun import perflab


def test_sizing_json():
    r = perflab("sizing", "--vocab", "50257", "--b", "8", "--s", "1024", "--h", "2560", "--a", "32", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    verdicts = {c["rule"]: c["verdict"] for c in d["checks"]}
    assert verdicts["vocab % 64 == 0"] == "FAIL" and verdicts["h/a divisible by 64"] == "FAIL"
    assert verdicts["b·s divisible by 64"] == "pass" and d["failed"] == 2


def test_sizing_with_tensor_parallelism_checks_each_ranks_vocabulary_slice():
    r = perflab("sizing", "--vocab", "32000", "--b", "1", "--s", "4096", "--h", "4096", "--a", "32", "--t", "8",
                "--json")
    assert r.returncode == 0, r.stderr
    checks = {c["rule"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["vocab % (64·t) == 0"]["verdict"] == "FAIL" and "pad V to 32256" in checks["vocab % (64·t) == 0"]["why"]
