"""More of the GEMM package's edges: one-line refusals of bad input (shapes, ranges, fits, widths,
the fused kernel's operands), fp8 where a device would take it, Triton missing or imported natively,
a compiler or cuobjdump that fails, compiled results without per-SM limits, the lab checks' less
common verdicts, and figures drawn onto an axis the caller gives.

Nothing here compiles a kernel: the compiler refusals tried in this process fail in Triton's option
checks or kernel lookup within milliseconds, and the child processes are replaced by their failing answers.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from perflab.core.dtypes import parse_dtype
from perflab.core.errors import InputError, UnsupportedError
from perflab.core.grading import LabCheckError
from perflab.gemm import (
    compiled,
    lab04,
    lab04b,
    lab05,
    mamf,
    panel,
    plots,
    shapes,
    swiglu,
    triton_fused,
)
from perflab.gemm import occupancy as occ
from perflab.gemm import triton_matmul as tm

needs_triton = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


def failed_process(stderr: str):
    """A subprocess.run stand-in for a child that exits 1 with `stderr`."""
    def run(args, **kw):
        return subprocess.CompletedProcess(args, 1, "", stderr)
    return run


def tile(tmp_path: Path, target: str = "sm_90", with_limits: bool = True, cannot_run: str | None = None):
    """A compiled result as compile_many builds it, with figures of a real 128×128×64 fp16 sm_90 kernel."""
    cfg = tm.TileConfig(128, 128, 64, num_warps=4, num_stages=3)
    lim = occ.sm_limits(target) if with_limits else None
    r = compiled.CompiledTile(config=cfg, dtype="fp16", target=target, shape=(4096, 4096, 4096), registers=168,
                              spill_bytes=0, shared_bytes=98304, num_warps=4, num_stages=3, tensor_core_kind="wgmma",
                              tensor_core_instructions=32, ptx_excerpt="wgmma.mma_async.sync.aligned.m64n128k16",
                              cuobjdump={"REG": 168, "STACK": 0, "SHARED": 0}, metadata={"shared": 98304},
                              cache_dir=str(tmp_path), cached=True, seconds=0.0, limits=lim, cannot_run=cannot_run)
    if lim is not None and cannot_run is None:
        r.occ = occ.occupancy(r.registers, r.shared_bytes, r.num_warps, lim)
    return r


# ---------------------------------------------------------------- shapes

def test_shape_model_refusals():
    with pytest.raises(InputError, match=r"^a predicted time needs a peak TFLOP/s > 0 \(this device's peak is unknown"):
        shapes.predicted_time_s(1024, 1024, 1024, sms=108, peak_tflops=0)
    with pytest.raises(InputError, match="^dimension 'x': use m, n or k$"):
        shapes.staircase("x", [128], {"m": 1, "n": 1, "k": 1}, sms=108)
    with pytest.raises(InputError, match="^give the fixed sizes m, k for a sweep over n$"):
        shapes.staircase("n", [128], {}, sms=108)
    with pytest.raises(InputError, match=r"^full waves are about the output's rows \(m\) or columns \(n\), not k$"):
        shapes.full_wave_sizes("k", {"m": 1024, "n": 1024}, sms=108)
    with pytest.raises(InputError, match="^--m-range needs three whole numbers: START STOP STEP$"):
        shapes.fine_values("a", 1024, 64, name="--m-range")
    with pytest.raises(InputError, match="^range needs three whole numbers"):
        shapes.fine_values(None, 1024, 64)  # type: ignore[arg-type]


def test_architectures_past_the_table_are_blackwell():
    assert shapes.arch_of("13.0") == ("blackwell", "13.0")
    assert shapes.arch_of("11.2") == ("blackwell", "11.2")


def test_alignment_rule_as_dict_carries_the_element_multiples():
    d = shapes.tensor_core_alignment("fp16", "hopper").as_dict()
    assert (d["required_bytes"], d["recommended_bytes"], d["itemsize"]) == (16, 128, 2)
    assert (d["required"], d["recommended"]) == (8, 64)


def test_checklist_flags_a_swiglu_width_off_the_multiple_of_64():
    item = shapes.sizing_checklist(vocab=50304, b=8, s=2048, h=4096, a=32, d_ff=11000)[-1]
    assert item.rule == "SwiGLU d_ff a multiple of 64 near 8/3·h" and item.ok is False
    assert item.detail == ("d_ff = 11000 (2.686·h) is divisible only by 8: measure 10944 and 11008 with "
                           "`perflab swiglu --hidden 4096`")


def test_fit_refuses_non_positive_times_and_a_falling_time_gets_no_slope():
    with pytest.raises(InputError, match="^measured times must be positive numbers$"):
        shapes.fit_tile([128, 256, 384], [1e-3, 0.0, 2e-3], "n", {"m": 256, "k": 64}, sms=2)
    # waves 1, 2, 3, 4 while the time falls: a negative slope explains nothing, so the line is flat
    fit = shapes.fit_tile([128, 256, 384, 512], [4e-3, 3e-3, 2e-3, 1e-3], "n", {"m": 256, "k": 64}, sms=2,
                          tiles=[(128, 128)], blocks_per_sm=[1])
    row = fit.best
    assert row["sec_per_wave"] == 0.0 and row["overhead_s"] == pytest.approx(2.5e-3) and row["steps"] == 3


def test_sm_counts_and_model_targets_refuse_gpus_without_one():
    with pytest.raises(InputError, match="^NVIDIA H200 SXM 141GB's SM count is not published; pass --sms$"):
        shapes.sm_count_of(gpu="h200-sxm")
    with pytest.raises(InputError, match="^'h999' is not a GPU with a published SM count in perflab's table"):
        shapes.model_target(None, "h999")
    with pytest.raises(InputError, match="^'h200-sxm' is not a GPU with a published SM count"):
        shapes.model_target(None, "h200-sxm")


def test_explain_gemm_says_when_the_gpu_has_no_mode_for_the_dtype():
    t = shapes.model_target(None, "a100-sxm-80gb")
    df = shapes.explain_gemm(1024, 1024, 1024, dtype="fp8", target=t)
    assert df.loc["roofline", "value"] == "NVIDIA A100 SXM 80GB has no dense fp8 mode"
    assert "predicted" not in df.index


# ---------------------------------------------------------------- occupancy

def test_occupancy_records_as_dicts_and_the_per_block_register_limit():
    lim = occ.sm_limits("sm_90")
    d = lim.as_dict()
    assert (d["gpu"], d["sm_count"], d["max_registers_per_block"]) == ("h100-sxm", 132, 65536)
    o = occ.occupancy(128, 32768, 4, lim)
    assert o.as_dict() == {"blocks_per_sm": o.blocks_per_sm, "warps_per_sm": o.warps_per_sm, "occupancy": o.occupancy,
                           "limited_by": o.limited_by, "blocks_by": o.blocks_by,
                           "registers_per_warp": 4096, "shared_per_block": o.shared_per_block}
    with pytest.raises(InputError, match=r"^255 registers × 1024 threads is over the 65536 registers a block may hold "
                                         r"on NVIDIA H100 SXM5 80GB: use fewer warps or a smaller tile$"):
        occ.occupancy(255, 0, 32, lim)


# ---------------------------------------------------------------- SwiGLU widths and attention

def test_swiglu_refusals():
    import pandas as pd

    with pytest.raises(InputError, match=r"^radius must be ≥ 0 \(got -1\)$"):
        swiglu.candidate_widths(4096, radius=-1)
    frame = pd.DataFrame({"d_ff": [10880, 11008], "tflops": [1.0, 2.0], "params_delta_pct": [-0.39, 0.78]})
    with pytest.raises(InputError, match="^the parameter budget must be ≥ 0 percent$"):
        swiglu.recommend(frame, -1)
    with pytest.raises(InputError, match=r"^no measured width changes the parameters by at most 0.1%: widen the budget$"):
        swiglu.recommend(frame, 0.1)
    assert swiglu.recommend(frame, 0.5)["d_ff"] == 10880


def test_swiglu_search_with_nothing_measured_says_why():
    import pandas as pd

    res = types.SimpleNamespace(frame=pd.DataFrame(), messages=["d_ff=10922: not enough memory"], path=None)
    with pytest.raises(InputError, match=r"^no width could be measured \(d_ff=10922: not enough memory\): choose smaller"):
        swiglu._assemble(4096, 8, "bf16", "cpu", 10922, res)
    res.messages = []
    with pytest.raises(InputError, match=r"^no width could be measured \(nothing ran\)"):
        swiglu._assemble(4096, 8, "bf16", "cpu", 10922, res)


def test_numpy_scalars_become_python_numbers():
    import numpy as np

    v = swiglu._py(np.int64(10944))
    assert v == 10944 and type(v) is int
    assert type(swiglu._py(np.float32(1.5))) is float and swiglu._py("x") == "x"


def test_fp8_is_refused_where_the_device_would_take_it(monkeypatch):
    """The SwiGLU search and the attention measurement refuse fp8 even on a device that runs it."""
    import perflab.core.dtypes as dtypes
    from perflab.gemm import attention

    monkeypatch.setattr(dtypes, "unsupported_reason", lambda dt, dev: None)
    with pytest.raises(InputError, match=r"^the SwiGLU search runs in bf16, fp16, tf32 or fp32 \(fp8 training needs"):
        swiglu.make_mlp_gemms(16, 16, 48, "fp8", "cpu")
    with pytest.raises(InputError, match="^attention is measured in bf16, fp16, tf32 or fp32$"):
        attention.measure_sdpa(1, 1, 16, 16, "fp8", "cpu")


# ---------------------------------------------------------------- MAMF

def test_mamf_fp8_operands_go_through_the_shared_fp8_path():
    fp8 = parse_dtype("fp8")
    # make_matmul builds fp8 operands; a CPU has no fp8 matmul, and says so
    with pytest.raises(UnsupportedError, match="^fp8 matmuls need an NVIDIA GPU of compute capability 8.9"):
        mamf._operands(16, 16, 16, fp8, torch.device("cpu"))
    # the fp8 check compares _scaled_mm's bf16 product with float64 (torch runs _scaled_mm on a CPU too)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(32, 16, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(16, 16, generator=g).to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones(())

    def fn():
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    assert 0 < mamf._check(fn, a, b, fp8) < 1e-2
    with pytest.raises(Exception, match="fp8 matmul"):  # a product that is wrong is caught
        mamf._check(lambda: 2 * fn(), a, b, fp8)


def test_mamf_search_and_ceiling_refusals():
    with pytest.raises(InputError, match="^every range needs at least one size$"):
        mamf.search([], [64], [64], measure=lambda p: {})
    empty = mamf.MamfResult(best=None, dtype="bf16", stat="mean", strategy="refine", grid_points=0, evaluated=0,
                            measured=0, elapsed_s=0.0, interrupted=True, path=Path("unused.jsonl"))
    with pytest.raises(ValueError, match="^save_ceiling_record needs a search that measured at least one point$"):
        mamf.save_ceiling_record(empty, None, [[64], [64], [64]])


def test_mamf_default_ranges():
    gpu = mamf.default_ranges(on_gpu=True)
    assert gpu["m"] == list(range(1024, 16385, 1024)) and gpu["n"] == gpu["k"] == gpu["m"]
    assert gpu["n"] is not gpu["m"]
    cpu = mamf.default_ranges(on_gpu=False)
    assert cpu["k"] == [256, 512, 768, 1024, 1280, 1536, 1792, 2048]
    assert mamf.default_ranges(on_gpu=True, smoke=True)["m"] == [64, 128, 192, 256]


# ---------------------------------------------------------------- labs 04, 04b and 05

def test_lab04_measured_drops():
    assert lab04.measured_drops([128, 256, 384, 512], [10.0, 9.5, 5.0, 4.9]) == [384]
    assert lab04.measured_drops([128, 256, 384], [10.0, 8.0, 7.9], threshold=0.25) == []


def _row(**kw):
    base = {"config": "128x128x64 w4 s3", "registers": 168, "spill_bytes": 0, "shared_bytes": 98304,
            "tensor_cores": "wgmma", "cannot_run": None, "tile_area": 16384, "blocks_per_sm": 2, "occupancy": 0.125,
            "limited_by": "shared memory", "tiles": 264, "waves": 1, "wave_efficiency": 1.0, "tile_efficiency": 1.0,
            "utilization": 1.0}
    return {**base, **kw}


def test_lab04b_config_that_cannot_run(monkeypatch):
    why = "255 registers × 1024 threads is over the 65536 registers a block may hold on NVIDIA H100 SXM5 80GB"
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [_row(cannot_run=why)])
    monkeypatch.setattr(lab04b, "best_of_search", lambda p=None: _row())
    cfg = dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)
    with pytest.raises(LabCheckError, match=f"compiled, but it does not fit an SM of h100-sxm: {why}"):
        lab04b.grade_config(cfg)


def test_lab04b_lower_occupancy_passes_and_a_wasted_wave_names_the_blocks_per_sm(monkeypatch):
    best = _row(config="128x128x64 w8 s3", blocks_per_sm=2, occupancy=0.25)
    monkeypatch.setattr(lab04b, "best_of_search", lambda p=None: best)
    cfg = dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)
    low = _row(blocks_per_sm=1, occupancy=0.0625, limited_by="registers", waves=2)
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [low])
    assert lab04b.grade_config(cfg)["mine"]["occupancy"] == 0.0625  # a diagnostic, not a grade
    half = _row(blocks_per_sm=1, tiles=144, waves=2, wave_efficiency=0.545, utilization=0.545)
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [half])
    with pytest.raises(LabCheckError, match=r"wastes part of a wave: useful share 54.5 % \(144 tiles in 2 wave\(s\).*"
                                            r"blocks per SM: 1 for yours"):
        lab04b.grade_config(cfg)


def test_lab04b_answer_that_is_not_a_dict():
    with pytest.raises(LabCheckError, match="pick_config should return a dict with block_m, block_n, block_k, "
                                            "num_warps, num_stages, not list"):
        lab04b.check_config_choice(lambda **kw: [128, 128, 64, 8, 3])


def test_lab05_defend_a_width_not_measured():
    import pandas as pd

    frame = pd.DataFrame({"d_ff": [10880, 10944]})
    assert lab05.defend(frame, 11000) == "d_ff = 11000 was not measured: pick one of the measured widths"


# ---------------------------------------------------------------- figures onto a given axis

def test_figures_draw_onto_the_callers_axis():
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    try:
        assert plots.predicted_staircase("n", [128, 256, 384], {"m": 1024, "k": 1024}, sms=2, ax=axes[0]) is fig
        assert [ln.get_label() for ln in axes[0].get_lines()] == ["256×128 tiles, 2 SMs"]
        heads = pd.DataFrame({"d": [64, 128], "a": [32, 16], "tflops": [1.0, 1.5]})
        assert plots.head_sizes(heads, ax=axes[1]) is fig
        assert axes[1].get_title() == "Attention speed by head size"
        widths = pd.DataFrame({"d_ff": [10922, 10944], "tflops": [1.0, 1.2]})
        published = pd.DataFrame({"d_ff": [10922, 10944], "tflops": [500.0, 600.0]})
        assert plots.swiglu_widths(widths, 10922, published=published, ax=axes[2]) is fig
        labels = [c.get_label() for c in axes[2].collections]
        assert labels[-1] == "published (other hardware; see source)"
        assert list(axes[2].collections[-1].get_offsets()[:, 1]) == [500.0, 600.0]
    finally:
        plt.close(fig)
    search = pd.DataFrame({"stage": ["coarse", "coarse", "refine"], "mean": [1.0, 2.0, 3.0]})
    f = plots.mamf_search(search, {"tflops": 3.0, "m": 64, "n": 64, "k": 64},
                          published={"tflops": 700.0, "accelerator": "H100 SXM"})
    try:
        lines = {ln.get_label(): ln.get_ydata()[0] for ln in f.axes[0].get_lines()}
        assert lines["published MAMF, H100 SXM: 700 TFLOP/s"] == 700.0
    finally:
        plt.close(f)


# ---------------------------------------------------------------- the Triton matmul's edges

def test_tile_config_tile_and_parse_tile3_refusal():
    assert tm.TileConfig(64, 128, 32).tile == (64, 128)
    with pytest.raises(InputError, match=r"^tile 'axbxc' should be three whole numbers, e\.g\. 128x128x64$"):
        tm.parse_tile3("axbxc")


def test_triton_found_without_a_spec_counts_as_missing(monkeypatch):
    """A `triton` in sys.modules without a spec (find_spec raises ValueError) is no Triton to use."""
    fake = types.ModuleType("triton")  # its __spec__ is None
    monkeypatch.setitem(sys.modules, "triton", fake)
    tm.unavailable_reason.cache_clear()
    try:
        reason = tm.unavailable_reason()
        assert reason == (f"Triton is not installed here ({platform.system()} {platform.machine()}); its wheels exist "
                          "for Linux x86_64 and aarch64: `pip install 'perflab[kernels]'` there")
        assert not tm.available()
        with pytest.raises(UnsupportedError, match=r"^Triton is not installed here"):
            tm.require()
    finally:
        tm.unavailable_reason.cache_clear()


def test_interpreter_process_that_fails_says_its_last_line(monkeypatch):
    monkeypatch.setattr(subprocess, "run", failed_process("Traceback (most recent call last):\nValueError: boom\n"))
    with pytest.raises(UnsupportedError, match="^the interpreter process failed: ValueError: boom$"):
        tm.run_in_interpreter_process("perflab.gemm.triton_matmul", "check", {"m": 8, "n": 8, "k": 8})
    monkeypatch.setattr(subprocess, "run", failed_process(""))
    with pytest.raises(UnsupportedError, match="^the interpreter process failed: no message$"):
        tm.run_in_interpreter_process("perflab.gemm.triton_matmul", "check", {})


def test_interpreting_after_a_native_import_is_refused(monkeypatch):
    monkeypatch.setattr(tm, "import_triton", lambda interpret: False)
    with pytest.raises(UnsupportedError, match=r"^Triton was imported natively in this process \(torch.compile does that\)"):
        tm.jitted(lambda: None, True)


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="the size limit is the interpreter's (CPU only)")
def test_triton_matmul_check_refuses_sizes_the_interpreter_cannot_run():
    with pytest.raises(InputError, match=r"^4096×4096×4096 is too large to check here \(the interpreter runs every"):
        tm.check(4096, 4096, 4096)


@needs_triton
def test_triton_version_and_a_native_jit_function():
    tm.import_triton(True)  # the mode CPU tests use; Triton's own imports below leave it as it is
    from triton.runtime.jit import JITFunction

    from perflab.gemm.triton_kernels import bias_gelu_kernel

    assert tm.triton_version() == importlib.metadata.version("triton")
    jf = tm.jitted(bias_gelu_kernel, False)
    assert isinstance(jf, JITFunction) and jf.fn is bias_gelu_kernel


# ---------------------------------------------------------------- the fused kernel's refusals

def test_fused_kernel_refuses_mismatched_operands():
    with pytest.raises(InputError, match=r"^x must be \[rows, cols\] and bias \[cols\] \(got \(2, 3\) and \(4,\)\)$"):
        triton_fused.bias_gelu(torch.ones(2, 3), torch.ones(4))


@needs_triton
def test_fused_check_refuses_sizes_the_interpreter_cannot_run():
    with pytest.raises(InputError, match=r"^4000×1001 is too large to check in the interpreter: keep rows·cols ≤ 4 M$"):
        triton_fused.check(4000, 1001)


# ---------------------------------------------------------------- compiling for a GPU that is not here

@needs_triton
def test_a_config_the_compiler_refuses_is_reported_and_the_batch_goes_on(tmp_path):
    tm.import_triton(True)
    job = compiled.matmul_job(tm.TileConfig(), "fp16", 90, (4096, 4096, 4096))
    three_warps = {**job, "num_warps": 3}
    # refused before Triton's frontend runs: a process whose Triton also interprets kernels compiles
    # nothing reliably (hence the child process), but these refusals come from the options and the lookup
    no_kernel = {**job, "kernel": "no_such_kernel"}
    res = compiled._compile_in_this_process([three_warps, no_kernel], [str(tmp_path / "a"), str(tmp_path / "b")])
    assert res == [{"error": "AssertionError: num_warps must be a power of 2"},
                   {"error": "AttributeError: module 'perflab.gemm.triton_kernels' has no attribute 'no_such_kernel'"}]
    assert not (tmp_path / "a").exists()


@needs_triton
def test_fused_compile_refused_by_triton(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(compiled, "_compile_jobs", lambda jobs, dirs, timeout=300: compiled._compile_in_this_process(jobs, dirs))
    tm.import_triton(True)
    with pytest.raises(InputError, match="^Triton could not compile the fused kernel for sm_90: AssertionError: "
                                         "num_warps must be a power of 2$"):
        triton_fused.compile_for("sm_90", "bf16", num_warps=3)


def test_compiler_process_that_fails_says_its_last_line(monkeypatch):
    monkeypatch.setattr(subprocess, "run", failed_process("Traceback (most recent call last):\nImportError: no triton\n"))
    with pytest.raises(UnsupportedError, match="^the Triton compiler process failed: ImportError: no triton$"):
        compiled._compile_jobs([], [])
    monkeypatch.setattr(subprocess, "run", failed_process("  \n"))
    with pytest.raises(UnsupportedError, match="^the Triton compiler process failed: no message$"):
        compiled._compile_jobs([], [])


def test_cuobjdump_missing(monkeypatch, tmp_path):
    import importlib.machinery
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(compiled, "require", lambda: None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(UnsupportedError, match="^Triton's package folder was not found$"):
        compiled.cuobjdump_path()
    spec = importlib.machinery.ModuleSpec("triton", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "triton" else real(name, *a))
    want = tmp_path / "backends" / "nvidia" / "bin" / "cuobjdump"
    with pytest.raises(UnsupportedError, match=f"^no cuobjdump in Triton's wheel \\({want}\\): this Triton build cannot "
                                               "report resources$"):
        compiled.cuobjdump_path()


@needs_triton
def test_cuobjdump_on_a_file_that_is_no_cubin(tmp_path):
    bad = tmp_path / "kernel.cubin"
    bad.write_text("not a cubin\n")
    with pytest.raises(UnsupportedError, match=f"^cuobjdump failed on {bad}: cuobjdump fatal +: Invalid fatbin header"):
        compiled.resource_usage(bad)


def test_cuobjdump_without_per_function_figures(monkeypatch, tmp_path):
    script = tmp_path / "cuobjdump"
    script.write_text("#!/bin/sh\necho 'Resource usage:'\necho ' Common:'\necho '  GLOBAL:0'\n")
    script.chmod(0o755)
    monkeypatch.setattr(compiled, "cuobjdump_path", lambda: script)
    with pytest.raises(UnsupportedError, match="^cuobjdump printed no per-function resource usage for x.cubin$"):
        compiled.resource_usage("x.cubin")


@needs_triton
def test_compile_many_refusals_before_compiling():
    cfg = tm.TileConfig()
    with pytest.raises(InputError, match=r"^shape \(0, 16, 16\): give three sizes m, n, k ≥ 1$"):
        compiled.compile_many([cfg], "fp16", "sm_90", shape=(0, 16, 16))
    with pytest.raises(InputError, match=r"^shape \(16, 16\): give three sizes"):
        compiled.compile_many([cfg], "fp16", "sm_90", shape=(16, 16))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="^NVIDIA A100 SXM 80GB is compute capability 8.0, not sm_90: pick --target "
                                         "sm_80 or another GPU$"):
        compiled.compile_many([cfg], "fp16", "sm_90", gpu="a100-sxm-80gb")


@needs_triton
def test_compile_many_reports_a_config_triton_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    said = "CompilationError: out of resources: shared memory, Required: 262144, Hardware limit: 232448"
    monkeypatch.setattr(compiled, "_compile_jobs", lambda jobs, dirs, timeout=300: [{"error": said} for _ in jobs])
    with pytest.raises(InputError, match=f"^Triton could not compile 128x128x64 w4 s3 fp16 for sm_90: {said}$"):
        compiled.compile_tile(tm.TileConfig(), "fp16", "sm_90", use_cache=False)


def test_compiled_tile_without_limits_refuses_waves_and_staircases(tmp_path):
    r = tile(tmp_path, target="sm_75", with_limits=False)
    with pytest.raises(InputError, match=r"^no per-SM limits for sm_75: waves need a GPU from the table \(--gpu\)$"):
        compiled.waves(r, 4096, 4096, 4096)
    with pytest.raises(InputError, match="^no per-SM limits for sm_75$"):
        compiled.staircase(r, "n", [1024], {"m": 4096, "k": 4096})
    with pytest.raises(InputError, match="^no per-SM limits for sm_75$"):
        panel.staircase_frame(r, 4096, 4096, 4096)
    r = tile(tmp_path, cannot_run="shared memory per block 300 KiB is over the limit")
    with pytest.raises(InputError, match="^shared memory per block 300 KiB is over the limit$"):
        compiled.staircase(r, "n", [1024], {"m": 4096, "k": 4096})


def test_compiled_tile_staircase_ptx_and_json(tmp_path):
    r = tile(tmp_path)
    assert r.occ is not None and r.occ.blocks_per_sm == 2
    df = compiled.staircase(r, "n", [128 * 132, 128 * 132 + 1], {"m": 256, "k": 4096})
    assert list(df["tiles"]) == [264, 266] and list(df["waves"]) == [1, 2]
    (tmp_path / "kernel.ptx").write_text(".version 8.7\n.target sm_90a\n")
    assert r.ptx() == ".version 8.7\n.target sm_90a\n"
    import json

    d = json.loads(compiled.as_json(r))
    assert "limits" not in d and "occ" not in d
    assert d["registers"] == 168 and d["config"]["block_k"] == 64 and d["shape"] == [4096, 4096, 4096]


@needs_triton
def test_tile_panel_refuses_what_cannot_run_or_has_no_limits(monkeypatch, tmp_path):
    monkeypatch.setattr(compiled, "compile_tile", lambda *a, **kw: tile(tmp_path, cannot_run="too many registers"))
    with pytest.raises(InputError, match="^too many registers$"):
        panel.tile_config(target="sm_90")
    monkeypatch.setattr(compiled, "compile_tile", lambda *a, **kw: tile(tmp_path, target="sm_75", with_limits=False))
    with pytest.raises(InputError, match="^no per-SM limits for sm_75 in perflab's table: choose sm_80 or sm_90$"):
        panel.tile_config(target="sm_75")


@needs_triton
def test_build_says_what_it_compiles_and_refuses_a_ptx_that_disagrees_with_the_metadata(monkeypatch, tmp_path, capsys):
    """The verbose line a lesson prints before compiling, and the cross-check between the PTX's
    threads per block and Triton's warps: a cached result whose two disagree is refused."""
    import json

    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    job = {"name": "matmul", "cc": 90, "dtype": "fp16", "config": {"block_m": 64}}
    monkeypatch.setattr(compiled, "_compile_jobs", lambda jobs, dirs, timeout=300: [{"error": "refused"} for _ in jobs])
    out, now = compiled.build([job], use_cache=False, verbose=True)
    assert out == [{"error": "refused"}] and now == {0}
    assert capsys.readouterr().out.startswith(f"compiling 1 kernel(s) for sm_90 (about a second each; cached in {tmp_path}")
    d = tmp_path / compiled._key(job)
    d.mkdir()
    (d / "result.json").write_text(json.dumps({"metadata": {"num_warps": 4}, "reqntid": 256}))
    with pytest.raises(UnsupportedError, match="^PTX asks for 256 threads but Triton reports 4 warps$"):
        compiled.build([job])
    (d / "result.json").write_text(json.dumps({"metadata": {"num_warps": 8}, "reqntid": 256}))
    assert compiled.build([job])[0][0]["cache_dir"] == str(d)


def test_a_recorded_gpu_wave_sweep_is_drawn_with_the_tile_that_fits_it():
    """A reference sweep as `perflab reference record` writes it on a GPU (here made from the wave
    model's own times for 256x128 tiles on 132 SMs): the figure names the device and the fitted
    staircase puts its steps where the recorded times step."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fixed, sms = {"m": 2304, "k": 4096}, 132
    ns = list(range(128, 4097, 64))
    times = [shapes.predicted_time_s(fixed["m"], n, fixed["k"], sms=sms, tile=(256, 128), peak_tflops=800) for n in ns]
    frame = pd.DataFrame({"n": ns, "median_s": times,
                          "tflops": [2 * fixed["m"] * n * fixed["k"] / t / 1e12 for n, t in zip(ns, times)]})
    ref = types.SimpleNamespace(frame=frame, params={"dim": "n", "fixed": fixed, "sms": sms},
                                label="NVIDIA H100 80GB HBM3, driver 570", provenance={"device": "NVIDIA H100 80GB HBM3"})
    fig = plots.reference_waves(ref)
    try:
        top, bottom = fig.axes[:2]
        assert top.get_title() == "Reference: NVIDIA H100 80GB HBM3, driver 570"
        assert "measured on NVIDIA H100 80GB HBM3" in [t.get_text() for t in top.get_legend().get_texts()]
        fit = shapes.fit_tile(ns, times, "n", fixed, sms=sms)
        best = fit.table.iloc[0]
        # 256x128 with one block per SM, or 128x128 with two: the same wave size, the same staircase
        assert (best["tile"], int(best["blocks_per_sm"])) == ("256x128", 1) and best["rel_rms"] < 1e-9
        assert len(bottom.get_lines()) >= 2  # the recorded times and at least the best staircase
    finally:
        plt.close(fig)
