"""Lesson 10's panel: recompiles follow the dynamic setting; GPU-only modes answer in one line."""

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
