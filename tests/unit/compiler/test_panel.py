"""Tests of `perflab.compiler.panel`."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from perflab.compiler import panel


def test_static_shapes_recompile_for_every_length_and_dynamic_for_none():
    static = panel.compile_view("default", "fp32", "dynamic=False", backend="eager", reps=1)
    assert list(static["recompiled"]) == ["yes", "yes", "yes"] and list(static["graphs so far"]) == [1, 2, 3]
    dyn = panel.compile_view("default", "fp32", "dynamic=True", backend="eager", reps=1)
    assert list(dyn["recompiled"]) == ["yes", "no", "no"]
    assert all(v.endswith(("ms", " s")) for v in static["compiled call"])


def test_gpu_only_modes_are_skipped_on_a_cpu_with_the_reason():
    assert panel.compile_view("reduce-overhead", "fp32", "default").startswith("reduce-overhead: skipped on cpu")


def test_times_have_no_padded_zeros():
    assert panel.short_time(0.00026) == "0.26 ms" and panel.short_time(0.24) == "240 ms" and panel.short_time(1.0) == "1 s"


def test_the_panel_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="^mode must be one of default, reduce-overhead, max-autotune, got 'fast'$"):
        panel.compile_view("fast", "fp32", "default")


def test_the_panel_hands_each_graph_to_the_inductor(monkeypatch):
    seen = []

    def compile_fx(gm, example_inputs, config_patches=None):  # stands in for the inductor's minutes-long compile
        seen.append(config_patches)
        return gm.forward

    monkeypatch.setitem(sys.modules, "torch._inductor.compile_fx", SimpleNamespace(compile_fx=compile_fx))
    monkeypatch.setattr(panel, "LENGTHS", (16,))
    df = panel.compile_view("default", "fp32", "dynamic=False", backend="inductor", reps=1)
    assert seen == [None]
    assert df[["seq", "recompiled", "graphs so far"]].to_dict("records") == [{"seq": 16, "recompiled": "yes",
                                                                              "graphs so far": 1}]
