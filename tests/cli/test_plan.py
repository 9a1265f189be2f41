"""`perflab plan`: a Hugging Face config planned on a cluster, its JSON and table, one line for bad input."""

from __future__ import annotations

import json

import pytest
from clirun import perflab

SMALL_LLAMA = ["--hf-config", "llama", "--hf-set", "num_hidden_layers=2", "hidden_size=128", "intermediate_size=344",
               "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=512", "max_position_embeddings=256",
               "bos_token_id=1", "eos_token_id=2", "pad_token_id=0"]


def test_plan_json_of_a_config_on_fsdp_and_tensor_parallel_ranks():
    r = perflab("plan", *SMALL_LLAMA, "--gpus", "16", "--fsdp", "--tp", "2", "--seq", "128", "--micro-batch", "2",
                "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["layout"] == {"gpus": 16, "tp": 2, "fsdp": True, "dtype": "bf16", "ac": "none", "sp": False}
    assert d["cluster"]["gpu"] == "h100-sxm" and d["fits"] is True
    assert set(d["memory_bytes"]) == {"parameters", "gradients", "optimizer state", "activations", "temporaries"}
    assert sum(d["memory_bytes"].values()) == d["peak_bytes"] > 0
    assert d["step_s"] >= d["compute_s"] > 0 and d["comm_s"] > 0
    assert d["comm_hidden_s"] + d["comm_exposed_s"] == pytest.approx(d["comm_s"])
    assert d["tokens_per_gpu_step"] == 2 * 128 and 0 < d["mfu"] < 1
    # the whole job's tokens: 8 data-parallel groups, each a micro-batch of 256 tokens per step
    assert d["tokens_per_s"] == pytest.approx(8 * 256 / d["step_s"])


def test_plan_table_names_each_part_with_its_unit():
    r = perflab("plan", *SMALL_LLAMA, "--gpus", "8", "--fsdp", "--seq", "64")
    assert r.returncode == 0, r.stderr
    for label in ("memory: parameters", "memory: activations", "memory: peak", "fits", "step: communication exposed",
                  "tokens/s", "MFU"):
        assert label in r.stdout
    assert " MB" in r.stdout or " GB" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--gpus", "8", "--tp", "3"], "--tp 3 does not divide --gpus 8"),
    (["--gpu", "tpu-v5"], "--gpu 'tpu-v5' is not a GPU perflab can plan for"),
    (["--gpus", "16", "--tp", "16"], "spans nodes"),
    (["--budget", "900"], "--budget 900 GB is more than"),
])
def test_bad_input_is_one_line(args, message):
    r = perflab("plan", *SMALL_LLAMA, "--seq", "64", *args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_factory_takes_no_batch_options_and_a_missing_target_is_one_line():
    r = perflab("plan", "tests.unit.plan.factories:tiny_gpt", "--seq", "64")
    assert r.returncode != 0 and "--micro-batch and --seq size the batch of --hf-config" in r.stderr
    r = perflab("plan")
    assert r.returncode != 0 and "give TARGET" in r.stderr and "Traceback" not in r.stderr


def test_a_factory_is_planned_as_audit_takes_it():
    r = perflab("plan", "tests.unit.plan.factories:tiny_gpt", "--gpus", "2", "--fsdp", "--dtype", "fp32", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tokens_per_gpu_step"] == 64 and d["fits"] and d["layout"]["fsdp"]
