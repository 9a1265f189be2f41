"""Tests of `perflab.profiling`."""

import perflab.profiling


def test_lazy_packages_list_their_submodules():
    names = dir(perflab.profiling)
    assert names == sorted(names) and "trace" in names and "diagnose" in names
