"""Tests of `perflab.gemm.compiled`."""

from __future__ import annotations

import json
import random
import re
import subprocess

import pytest
from clirun import perflab

from perflab.compiler import fused
from perflab.core.errors import InputError, UnsupportedError
from perflab.gemm import (
    compiled,
    panel,
)
from perflab.gemm import occupancy as occ
from perflab.gemm import triton_matmul as tm

from .helpers import KERNEL, _needs_triton, failed_process, needs_triton, tile


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path_factory.mktemp("kernels")))
    yield
    mp.undo()


def random_configs(seed: int, count: int) -> list[tm.TileConfig]:
    """Configs nobody here picked: drawn from the usual ranges with a fixed seed."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        c = tm.TileConfig(rng.choice([32, 64, 128]), rng.choice([32, 64, 128]), rng.choice([16, 32, 64]),
                          rng.choice([2, 4, 8]), rng.choice([2, 3, 4]), rng.choice([1, 4, 8]))
        if c not in out:
            out.append(c)
    return out


def cuobjdump_report(cubin) -> dict[str, int]:
    from perflab.gemm.compiled import cuobjdump_path

    text = subprocess.run([str(cuobjdump_path()), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    line = text.split("Function matmul_kernel:")[1].strip().splitlines()[0]
    return {k: int(v) for k, v in re.findall(r"([A-Z]+):(\d+)", line)}


@needs_triton
def test_fused_compile_refused_by_triton(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))  # compiled in the child process, as a lesson does
    tm.import_triton(True)
    with pytest.raises(InputError, match="^Triton could not compile the fused kernel for sm_90: AssertionError: "
                                         "num_warps must be a power of 2$"):
        fused.compile_for("sm_90", "bf16", num_warps=3)


def test_compiler_process_that_fails_says_its_last_line(monkeypatch):
    monkeypatch.setattr(subprocess, "run", failed_process("Traceback (most recent call last):\nImportError: no triton\n"))
    with pytest.raises(UnsupportedError, match="^the Triton compiler process failed: ImportError: no triton$"):
        compiled.compile_in_child([], [])
    monkeypatch.setattr(subprocess, "run", failed_process("  \n"))
    with pytest.raises(UnsupportedError, match="^the Triton compiler process failed: no message$"):
        compiled.compile_in_child([], [])


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
    with pytest.raises(InputError, match=f"^Triton could not compile 128x128x64 w4 s3 fp16 for sm_90: {said}$"):
        compiled.compile_tile(tm.TileConfig(), "fp16", "sm_90", use_cache=False,
                              compile_jobs=lambda jobs, dirs: [{"error": said} for _ in jobs])


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

    d = json.loads(compiled.as_json(r))
    assert "limits" not in d and "occ" not in d
    assert d["registers"] == 168 and d["config"]["block_k"] == 64 and d["shape"] == [4096, 4096, 4096]


@needs_triton
def test_build_says_what_it_compiles_and_refuses_a_ptx_that_disagrees_with_the_metadata(monkeypatch, tmp_path, capsys):
    """The verbose line a lesson prints before compiling, and the cross-check between the PTX's
    threads per block and Triton's warps: a cached result whose two disagree is refused."""

    monkeypatch.setenv("PERFLAB_KERNEL_CACHE", str(tmp_path))
    job = {"name": "matmul", "cc": 90, "dtype": "fp16", "config": {"block_m": 64}}
    out, now = compiled.build([job], use_cache=False, verbose=True,
                              compile_jobs=lambda jobs, dirs: [{"error": "refused"} for _ in jobs])
    assert out == [{"error": "refused"}] and now == {0}
    assert capsys.readouterr().out.startswith(f"compiling 1 kernel(s) for sm_90 (about a second each; cached in {tmp_path}")
    d = tmp_path / compiled._key(job)
    d.mkdir()
    (d / "result.json").write_text(json.dumps({"metadata": {"num_warps": 4}, "reqntid": 256}))
    with pytest.raises(UnsupportedError, match="^PTX asks for 256 threads but Triton reports 4 warps$"):
        compiled.build([job])
    (d / "result.json").write_text(json.dumps({"metadata": {"num_warps": 8}, "reqntid": 256}))
    assert compiled.build([job])[0][0]["cache_dir"] == str(d)


def test_kernel_text_report_for_a_kernel_that_cannot_launch(monkeypatch):
    _needs_triton()
    from perflab.core.errors import InputError
    from perflab.gemm import compiled

    def too_big(registers, shared_bytes, num_warps, limits):  # what occupancy() says of a kernel over a limit
        raise InputError(f"shared memory per block {shared_bytes} is over {limits.name}'s limit: lower num_stages")

    monkeypatch.setattr(compiled, "occupancy", too_big)
    r = perflab(*KERNEL, "--target", "sm_80")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("cannot run: shared memory per block ")


def test_compile_targets_in_the_forms_people_write():
    assert compiled.parse_target("9.0") == compiled.parse_target("sm_90") == 90
    with pytest.raises(InputError, match="give a CUDA architecture like sm_80"):
        compiled.parse_target("hopper")


@needs_triton
@pytest.mark.parametrize(("target", "seed", "kinds"), [("sm_90", 90, ("wgmma", "mma")), ("sm_80", 80, ("mma",))])
def test_compiled_figures_equal_cuobjdumps(kernel_cache, target, seed, kinds):
    from perflab.gemm import compiled

    dtype = {"sm_90": "fp16", "sm_80": "bf16"}[target]
    configs = random_configs(seed, 2)
    results = compiled.compile_many(configs, dtype, target)
    for cfg, r in zip(configs, results, strict=True):
        rep = cuobjdump_report(r.cubin_path)
        assert r.registers == rep["REG"] and r.spill_bytes == rep["STACK"], (cfg, rep)
        assert r.shared_bytes == r.metadata["shared"] + rep["SHARED"]
        assert r.metadata["shared"] >= (cfg.block_m + cfg.block_n) * cfg.block_k * 2  # at least one stage of A and B
        # sm_90 has both: Triton emits wgmma (a warp group of 4 warps on a 64-row slice) when the
        # tile allows it and Ampere's mma.sync otherwise (e.g. BLOCK_M = 32); sm_80 has only mma
        assert r.num_warps == cfg.num_warps and r.tensor_core_instructions > 0
        assert r.tensor_core_kind in kinds and str(r.tensor_core_kind) in r.ptx_excerpt
        lim = occ.sm_limits(target)
        want = occ.occupancy(rep["REG"], r.shared_bytes, cfg.num_warps, lim)
        assert r.occ == want
        rpt = compiled.report(r, (3000, 5000, 1024))
        assert rpt["tiles"] == -(-3000 // cfg.block_m) * -(-5000 // cfg.block_n)
        assert rpt["waves"] == -(-rpt["tiles"] // (lim.sm_count * want.blocks_per_sm))
        assert rpt["wave_efficiency"] == pytest.approx(rpt["tiles"] / (rpt["waves"] * lim.sm_count * want.blocks_per_sm))


@needs_triton
def test_a_cached_config_answers_fast(kernel_cache):
    import time

    from perflab.gemm import compiled

    cfg = random_configs(90, 1)[0]
    first = compiled.compile_tile(cfg, "fp16", "sm_90")
    t = time.perf_counter()
    again = compiled.compile_tile(cfg, "fp16", "sm_90")
    assert again.cached and time.perf_counter() - t < 1.0
    assert (again.registers, again.shared_bytes, again.spill_bytes) == (first.registers, first.shared_bytes, first.spill_bytes)


@needs_triton
def test_cli_reports_the_figures_and_refuses_bad_input(kernel_cache):

    cfg = random_configs(90, 1)[0]
    args = ("kernel", "--tile", f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k}", "--warps", str(cfg.num_warps),
            "--stages", str(cfg.num_stages), "--group-m", str(cfg.group_m), "--dtype", "fp16", "--target", "sm_90")
    first = perflab(*args, "--m", "1040", "--n", "3040", "--k", "496", "--json")
    assert first.returncode == 0, first.stderr
    r = perflab(*args, "--m", "1024", "--n", "3072", "--k", "512", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("registers", "spill_bytes", "shared_bytes", "blocks_per_sm", "occupancy", "limited_by",
                "tensor_core_instructions", "tiles", "waves", "wave_efficiency"):
        assert d[key] is not None, key
    # the same kernel as the first call (sizes divisible by 16 give the same compiled signature): cached
    assert d["cached"] is True and json.loads(first.stdout)["registers"] == d["registers"]
    r = perflab("kernel", "--tile", "32x32x16", "--warps", "2", "--target", "sm_80", "--dtype", "bf16",
                "--m", "37", "--n", "45", "--k", "53", "--run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["run_passed"] and d["max_abs_err"] <= d["run_atol"] + d["run_rtol"] * 4 * 53 ** 0.5
    assert d["tiles"] == 2 * 2 and d["waves"] == 1 and d["tensor_core_kind"] == "mma"
    for bad, said in ((["--tile", "100x128x64"], "power of two"), (["--target", "sm_70"], "sm_75"),
                      (["--m", "64"], "all three"), (["--dtype", "fp8"], "fp32, fp16, bf16"),
                      (["--tile", "256x256x128", "--stages", "4"], "shared memory")):
        r = perflab("kernel", *bad)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)


@needs_triton
def test_fused_kernel_compiles_for_sm_90(kernel_cache):
    from perflab.compiler import fused

    r = fused.compile_for("sm_90", "bf16")
    rep = subprocess.run([str(__import__("perflab.gemm.compiled", fromlist=["x"]).cuobjdump_path()),
                          "--dump-resource-usage", r["cubin"]], capture_output=True, text=True, check=True).stdout
    line = rep.split("Function bias_gelu_kernel:")[1].strip().splitlines()[0]
    figs = {k: int(v) for k, v in re.findall(r"([A-Z]+):(\d+)", line)}
    assert r["registers"] == figs["REG"] and r["spill_bytes"] == figs["STACK"] == 0
    assert r["blocks_per_sm"] >= 1 and 0 < r["occupancy"] <= 1
