"""Sharding's edges: tensor parallelism of a Llama-style model (rotary positions, gated MLP), the
run's refusals, the lab's grader on non-numbers, and why a two-node launch cannot run."""

from __future__ import annotations

import json

import pytest
from clirun import perflab

from perflab.core.errors import InputError, PerflabError
from perflab.core.grading import LabCheckError
from perflab.shard import formulas as F
from perflab.shard import lab12, netns
from perflab.shard.run import _fmt, validate


def test_tensor_parallel_llama_matches_the_unsharded_blocks():
    r = perflab("shard", "--strategy", "tp", "--nproc", "2", "--preset", "tiny-llama", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and len(d["checks"]) == 7 and all(c["ok"] for c in d["checks"]), d["checks"]
    bwd = next(c for c in d["checks"] if c["name"] == "all-reduces per block (backward)")
    assert bwd["measured"] == bwd["predicted"] == [2] * 2  # the gated MLP's up and gate: still one
    outputs = next(c for c in d["checks"] if c["name"] == "outputs vs the unsharded blocks")
    assert float(outputs["measured"]) < 1e-4


def test_run_refuses_unknown_strategies_and_models_too_large():
    with pytest.raises(InputError, match="unknown strategy 'zero': use fsdp, tp or pp"):
        validate("zero", 2, [1], "gpipe", "tiny-gpt")
    with pytest.raises(InputError, match="gpt3-175b is too large to train here"):
        validate("fsdp", 2, [1], "gpipe", "gpt3-175b")  # 96 layers
    with pytest.raises(InputError, match="no stages to replay"):
        F.replay([])
    assert _fmt("idle_s", 0.01234) == "0.012 s" and _fmt("comm_calls", 4) == "4" and _fmt("x", 0.123456) == "0.123"


def test_lab12_grader_refuses_a_non_number_and_skips_mistakes_that_raise():
    with pytest.raises(LabCheckError, match="you returned 'fast': return a number"):
        lab12._grade("bubble", lambda p, m: "fast", [({"p": 2, "m": 4}, 0.2)], {}, rtol=1e-6, atol=0,
                     general="(p-1)/(m+p-1)")

    def broken(p, m):
        raise ZeroDivisionError

    hint = lab12._diagnose(lambda p, m: 0.2, [({"p": 2, "m": 4}, 0.2)], {"raises": (broken, "never")}, rtol=1e-6)
    assert hint is None


@pytest.mark.parametrize("platform, euid, ip, why", [
    ("darwin", 0, "/sbin/ip", "network namespaces are a Linux feature"),
    ("linux", 1000, "/sbin/ip", "needs root"),
    ("linux", 0, None, "iproute2"),
])
def test_two_node_launch_says_why_it_cannot_run(monkeypatch, platform, euid, ip, why):
    monkeypatch.setattr(netns.sys, "platform", platform)
    monkeypatch.setattr(netns.os, "geteuid", lambda: euid)
    monkeypatch.setattr(netns.shutil, "which", lambda name: ip)
    assert why in netns.unavailable()
    with pytest.raises(PerflabError, match=f"cannot run the two-node launch here: .*{why}"):
        netns.two_node_launch()


def test_a_failing_ip_command_is_one_line():
    if netns.unavailable() and "iproute2" in netns.unavailable():
        pytest.skip("no ip command here")
    with pytest.raises(PerflabError, match="ip link show perflab-no-such-link failed: "):
        netns._ip("link", "show", "perflab-no-such-link")
