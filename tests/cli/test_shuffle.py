"""The `perflab shuffle` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

from clirun import perflab


def test_shuffle_measure_times_the_whole_permutation():
    r = perflab("shuffle", "--n", "100", "--measure")
    assert r.returncode == 0, r.stderr
    assert "whole permutation:" in r.stdout and "MB (tracemalloc)" in r.stdout
    d = json.loads(perflab("shuffle", "--n", "100", "--measure", "--json").stdout)
    assert sorted(d["indices"]) == list(range(100)) and d["peak_bytes"] > 0 and d["seconds"] > 0
