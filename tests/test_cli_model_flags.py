"""`perflab flops` and `perflab memory` read a model's shape the same way: the same exact count."""

import json

from clirun import perflab

LLAMA2_7B_SHAPE = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000", "--ffn", "11008",
                   "--glu", "--rotary", "--no-bias"]


def run(*args):
    r = perflab(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_shape_flags_give_the_exact_llama2_7b_count_in_both_commands():
    flops = run("flops", *LLAMA2_7B_SHAPE)
    mem = run("memory", *LLAMA2_7B_SHAPE, "--precision", "bf16", "--optimizer", "sgd")
    assert flops["params"] == 6_738_415_616  # the released checkpoint's count
    assert mem["model"]["ffn"] == 11008 and mem["components_bytes"]["weights"] == 2 * 6_738_415_616
