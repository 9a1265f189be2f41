"""What the compiler made of a Triton kernel for a GPU that is not here: resources, occupancy, waves.

    >>> from perflab.gemm import compiled
    >>> r = compiled.compile_tile(TileConfig(128, 128, 64, num_warps=4, num_stages=3), "fp16", "sm_90")
    >>> r.registers, r.spill_bytes, r.shared_bytes, r.tensor_core_instructions

`triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))`
turns the kernel into PTX and a cubin for sm_90 with no GPU present. The figures:

* registers per thread and spilled bytes (the cubin's stack): read by the `cuobjdump
  --dump-resource-usage` that ships in Triton's wheel, from the cubin itself;
* shared bytes per block: Triton's metadata (`shared`, the dynamic shared memory it asks for at
  launch) plus cuobjdump's static SHARED, checked against each other where both speak;
* warps and stages: the options, checked against the PTX's `.reqntid` (threads per block);
* Tensor Core instructions: the PTX lines issuing `wgmma.mma_async` (sm_90) or `mma.sync` (sm_80).

The signature is the one Triton's launcher would build for row-major A, B and C of the given shape:
pointers 16-byte aligned, a stride of 1 a compile-time constant, sizes divisible by 16 marked so.

Compiles run in a child process (`python -m perflab.gemm.compiled`): Triton 3.x fixes the
interpreter-or-compiler mode when `triton.language` is imported, and a CPU process imports it in
interpreter mode to run kernels. Results (cubin, PTX, figures) are cached on disk under
$PERFLAB_KERNEL_CACHE or ~/.cache/perflab/kernels, keyed by the kernel source, Triton's version and
the configuration, so a repeated config answers in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.jsonable import JSON
from perflab.gemm.occupancy import TARGET_GPU, Occupancy, SMLimits, occupancy, sm_limits
from perflab.gemm.triton_matmul import TileConfig, dtype_name, require

TRITON_DTYPE = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
DEFAULT_SHAPE = (4096, 4096, 4096)  # a size where every dimension is divisible by 16 (what the figures assume)


def parse_target(target: str | int) -> int:
    """'sm_90', 'sm90', '9.0', 90 → 90. Any capability Triton's CUDA backend compiles for (≥ 75)."""
    t = str(target).strip().lower().replace("sm_", "").replace("sm", "")
    if re.fullmatch(r"\d+\.\d", t):
        t = t.replace(".", "")
    if not re.fullmatch(r"\d{2,3}a?", t):
        raise InputError(f"target {target!r}: give a CUDA architecture like sm_80 (A100) or sm_90 (H100)")
    cc = int(t.rstrip("a"))
    if cc < 75:
        raise InputError(f"target sm_{cc}: Triton compiles for sm_75 and newer; use sm_80 (A100) or sm_90 (H100)")
    return cc


def cache_root() -> Path:
    env = os.environ.get("PERFLAB_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "perflab" / "kernels"


def _triton_version() -> str:
    from importlib.metadata import version

    return version("triton")


def _kernel_source_hash() -> str:
    src = Path(__file__).with_name("triton_kernels.py").read_bytes()
    return hashlib.sha256(src).hexdigest()[:16]


def _int_spec(v: int) -> tuple[str, bool]:
    """How Triton's launcher specializes an int argument: ('constexpr', _) for 1, else i32/i64 and /16."""
    if v == 1:
        return "constexpr", False
    return ("i32" if -2**31 <= v < 2**31 else "i64"), v % 16 == 0


def kernel_signature(args: list[tuple[str, Any]], meta: tuple[tuple[str, Any], ...]
                     ) -> tuple[dict[str, str], dict[str, Any], list[int]]:
    """A compile request's signature, as Triton specialises a launch: each argument given as a type
    ('*fp16', 'fp32') keeps it (pointers count as 16-byte aligned); each given as an integer becomes
    'i32' ('i64' past 32 bits), or a constexpr when it is 1, and is marked divisible by 16 when it is. `meta` are the
    kernel's constexpr parameters. Returns (signature, constexprs, indices divisible by 16)."""
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    divisible: list[int] = []
    for i, (name, v) in enumerate(args):
        if isinstance(v, str):
            signature[name] = v
            if v.startswith("*"):
                divisible.append(i)
            continue
        kind, div16 = _int_spec(int(v))
        signature[name] = kind
        if kind == "constexpr":
            constexprs[name] = int(v)
        elif div16:
            divisible.append(i)
    for name, v in meta:
        signature[name] = "constexpr"
        constexprs[name] = v
    return signature, constexprs, divisible


def matmul_job(config: TileConfig, dtype: str, cc: int, shape: tuple[int, int, int]) -> JSON:
    """The compile request for the matmul kernel on row-major M×K, K×N and M×N tensors: the JSON the
    compiler's child process reads, and what the cache key is made of."""
    m, n, k = shape
    ty = "*" + TRITON_DTYPE[dtype]
    args = [("a_ptr", ty), ("b_ptr", ty), ("c_ptr", ty), ("M", m), ("N", n), ("K", k),
            ("stride_am", k), ("stride_ak", 1), ("stride_bk", n), ("stride_bn", 1), ("stride_cm", n), ("stride_cn", 1)]
    signature, constexprs, divisible = kernel_signature(
        args, (("BLOCK_M", config.block_m), ("BLOCK_N", config.block_n), ("BLOCK_K", config.block_k),
               ("GROUP_M", config.group_m), ("WIDEN", False)))
    return {"kernel": "matmul_kernel", "signature": signature, "constexprs": constexprs, "divisible": divisible,
            "cc": cc, "num_warps": config.num_warps, "num_stages": config.num_stages}


CACHE_FORMAT = 2  # bump when what a cache entry's result.json holds changes


def _key(job: JSON) -> str:
    blob = json.dumps({"job": job, "triton": _triton_version(), "src": _kernel_source_hash(), "format": CACHE_FORMAT},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _atomic_write(path: Path, data: bytes | str) -> None:
    """Write through a temporary file and rename: two processes compiling the same config (test
    workers, two notebooks) never read each other's half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- the child process

def compile_in_this_process(jobs: list[JSON], out_dirs: list[str]) -> list[JSON]:
    """Compile each job and write kernel.cubin / kernel.ptx / meta.json into its out_dir; per job, its
    metadata, or {"error": ...} when the compiler refuses it. Needs Triton imported natively (the child
    process's side of `compile_in_child`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    from perflab.gemm import triton_kernels

    results = []
    for job, out in zip(jobs, out_dirs, strict=True):
        t0 = time.perf_counter()
        try:
            fn = JITFunction(getattr(triton_kernels, job["kernel"]))
            attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
            src = ASTSource(fn, job["signature"], job["constexprs"], attrs)
            k = triton.compile(src, target=GPUTarget("cuda", job["cc"], 32),
                               options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
        except Exception as e:  # a config the compiler refuses: reported, not raised, so a batch goes on
            msg = str(e).strip().splitlines()
            results.append({"error": f"{type(e).__name__}: {msg[-1] if msg else ''}"[:400]})
            continue
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "kernel.cubin", k.asm["cubin"])
        _atomic_write(d / "kernel.ptx", k.asm["ptx"])
        md = k.metadata
        meta = {"shared": int(md.shared), "num_warps": int(md.num_warps), "num_stages": int(md.num_stages),
                "name": str(md.name), "compile_s": time.perf_counter() - t0, "triton": triton.__version__}
        _atomic_write(d / "meta.json", json.dumps(meta))
        results.append(meta)
    return results


def _worker_main() -> int:
    req = json.loads(sys.stdin.read())
    res = compile_in_this_process(req["jobs"], req["out_dirs"])
    sys.stdout.write(json.dumps(res))
    return 0


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


# what compiles a batch of jobs into their folders: `compile_in_child` (a test injects another)
Compiler = Callable[[list[JSON], list[str]], list[JSON]]


def compile_in_child(jobs: list[JSON], out_dirs: list[str], timeout: float = 300) -> list[JSON]:
    """`compile_in_this_process` in a child Python whose Triton is imported natively."""
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said explicitly (it warns otherwise)
    env["PYTHONPATH"] = os.pathsep.join([_package_root(), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "perflab.gemm.compiled"], input=json.dumps({"jobs": jobs, "out_dirs": out_dirs}),
                          capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UnsupportedError(f"the Triton compiler process failed: {tail}")
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- cuobjdump

def cuobjdump_path() -> Path:
    require()
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        raise UnsupportedError("Triton's package folder was not found")
    p = Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not p.exists():
        raise UnsupportedError(f"no cuobjdump in Triton's wheel ({p}): this Triton build cannot report resources")
    return p


_FIG = re.compile(r"\b([A-Z]+(?:\[\d+\])?):(\d+)")


def resource_usage(cubin: str | Path) -> dict[str, int]:
    """cuobjdump --dump-resource-usage of one cubin's kernel: {'REG': 255, 'STACK': 592, 'SHARED': 0, ...}."""
    out = subprocess.run([str(cuobjdump_path()), "--dump-resource-usage", str(cubin)], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise UnsupportedError(f"cuobjdump failed on {cubin}: {(out.stderr.strip().splitlines() or [''])[-1]}")
    lines = out.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Function ") and i + 1 < len(lines):
            figs = {k: int(v) for k, v in _FIG.findall(lines[i + 1])}
            if "REG" in figs:
                return figs
    raise UnsupportedError(f"cuobjdump printed no per-function resource usage for {cubin}")


# ---------------------------------------------------------------- the result

TC_PATTERNS = {"wgmma": re.compile(r"^\s*wgmma\.mma_async\b", re.M), "mma": re.compile(r"^\s*mma\.sync\b", re.M)}


def tensor_core_lines(ptx: str) -> tuple[str | None, int]:
    """('wgmma' | 'mma' | None, number of PTX instructions of that kind)."""
    for kind, pat in TC_PATTERNS.items():
        n = len(pat.findall(ptx))
        if n:
            return kind, n
    return None, 0


def ptx_excerpt(ptx: str, lines: int = 6) -> str:
    """The PTX instructions from the first Tensor Core instruction on, without comments and
    source-line markers (.loc)."""
    rows = [r.strip() for r in ptx.splitlines()]
    rows = [r for r in rows if r and not r.startswith(("//", ".loc", "$L__", "{", "}"))]
    for i, r in enumerate(rows):
        if TC_PATTERNS["wgmma"].match(r) or TC_PATTERNS["mma"].match(r):
            return "\n".join(rows[i: i + lines])
    return "(no Tensor Core instruction in this PTX)"


@dataclass
class CompiledTile:
    config: TileConfig
    dtype: str
    target: str
    shape: tuple[int, int, int]
    registers: int
    spill_bytes: int
    shared_bytes: int
    num_warps: int
    num_stages: int
    tensor_core_kind: str | None
    tensor_core_instructions: int
    ptx_excerpt: str
    cuobjdump: dict[str, int]
    metadata: dict[str, Any]
    cache_dir: str
    cached: bool
    seconds: float
    limits: SMLimits | None = None
    occ: Occupancy | None = None
    cannot_run: str | None = None  # one line: the limit a config breaks, and what to change
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cubin_path(self) -> Path:
        return Path(self.cache_dir) / "kernel.cubin"

    def ptx(self) -> str:
        return (Path(self.cache_dir) / "kernel.ptx").read_text()

    def as_dict(self) -> JSON:
        d: JSON = {"tile": f"{self.config.block_m}x{self.config.block_n}x{self.config.block_k}", "dtype": self.dtype,
             "target": self.target, "registers": self.registers, "spill_bytes": self.spill_bytes,
             "shared_bytes": self.shared_bytes, "num_warps": self.num_warps, "num_stages": self.num_stages,
             "tensor_core_kind": self.tensor_core_kind, "tensor_core_instructions": self.tensor_core_instructions,
             "cached": self.cached, "seconds": self.seconds, "cannot_run": self.cannot_run,
             "gpu": self.limits.gpu if self.limits else None}
        if self.occ is not None:
            d.update(blocks_per_sm=self.occ.blocks_per_sm, occupancy=self.occ.occupancy, limited_by=self.occ.limited_by,
                     warps_per_sm=self.occ.warps_per_sm, blocks_by=self.occ.blocks_by)
        else:
            d.update(blocks_per_sm=0 if self.cannot_run else None, occupancy=0.0 if self.cannot_run else None,
                     limited_by=None)
        return d


def limits_for(cc: int, gpu: str | None) -> SMLimits | None:
    """The per-SM limits of `gpu` (a table id, checked against `cc`), else of the table's GPU for `cc`, else None."""
    if gpu:
        lim = sm_limits(gpu)
        if lim.compute_capability.replace(".", "") != str(cc):
            raise InputError(f"{lim.name} is compute capability {lim.compute_capability}, not sm_{cc}: "
                             f"pick --target sm_{lim.compute_capability.replace('.', '')} or another GPU")
        return lim
    key = f"sm_{cc}"
    return sm_limits(key) if key in TARGET_GPU else None


def build(jobs: list[JSON], use_cache: bool = True, verbose: bool = False, *,
          compile_jobs: Compiler | None = None) -> tuple[list[JSON], set[int]]:
    """Compile (one child process for all uncached jobs, `compile_jobs` replacing it) and summarize
    each job: cuobjdump's figures, Triton's metadata, Tensor Core instructions, a PTX excerpt, the cache
    folder, as the cache's result.json keeps them. A job the compiler refuses gets {"error": ...}.
    Also returns which jobs were compiled now."""
    root = cache_root()
    dirs = [root / _key(j) for j in jobs]
    todo = [i for i, d in enumerate(dirs) if not (use_cache and (d / "result.json").exists())]
    out: list[JSON] = [{} for _ in jobs]
    if todo:
        if verbose:
            print(f"compiling {len(todo)} kernel(s) for sm_{jobs[todo[0]]['cc']} (about a second each; cached "
                  f"in {root} afterwards) …", flush=True)
        res = (compile_jobs or compile_in_child)([jobs[i] for i in todo], [str(dirs[i]) for i in todo])
        for i, r in zip(todo, res, strict=True):
            if "error" in r:
                out[i] = {"error": r["error"]}
                continue
            figs = resource_usage(dirs[i] / "kernel.cubin")
            ptx = (dirs[i] / "kernel.ptx").read_text()
            kind, count = tensor_core_lines(ptx)
            m = re.search(r"\.reqntid\s+(\d+)", ptx)
            summary = {"cuobjdump": figs, "metadata": r, "tensor_core_kind": kind, "tensor_core_instructions": count,
                       "ptx_excerpt": ptx_excerpt(ptx), "reqntid": int(m.group(1)) if m else None}
            _atomic_write(dirs[i] / "result.json", json.dumps(summary))
    for i, d in enumerate(dirs):
        if out[i].get("error"):
            continue
        s = json.loads((d / "result.json").read_text())
        md = s["metadata"]
        # cross-check: the PTX's threads per block against the warps Triton's metadata reports
        if s.get("reqntid") is not None and s["reqntid"] != md["num_warps"] * 32:
            raise UnsupportedError(f"PTX asks for {s['reqntid']} threads but Triton reports {md['num_warps']} warps")
        s["cache_dir"] = str(d)
        out[i] = s
    return out, set(todo)


def compile_many(configs: list[TileConfig], dtype: str = "fp16", target: str | int = "sm_90", *,
                 shape: tuple[int, int, int] | None = None, gpu: str | None = None,
                 use_cache: bool = True, verbose: bool = False, compile_jobs: Compiler | None = None) -> list[CompiledTile]:
    """Compile every config (one child process for all the uncached ones, `compile_jobs` replacing it:
    see `build`) and read their resources."""
    require()
    name = dtype_name(dtype)
    cc = parse_target(target)
    shp = tuple(int(v) for v in (shape or DEFAULT_SHAPE))
    if len(shp) != 3 or min(shp) < 1:
        raise InputError(f"shape {shape!r}: give three sizes m, n, k ≥ 1")
    limits = limits_for(cc, gpu)
    jobs = [matmul_job(c, name, cc, (shp[0], shp[1], shp[2])) for c in configs]
    t0 = time.perf_counter()
    summaries, todo = build(jobs, use_cache=use_cache, verbose=verbose, compile_jobs=compile_jobs)
    build_s = time.perf_counter() - t0
    out = []
    for i, (c, s) in enumerate(zip(configs, summaries, strict=True)):
        if "error" in s:
            raise InputError(f"Triton could not compile {c.label()} {name} for sm_{cc}: {s['error']}")
        figs, md, d = s["cuobjdump"], s["metadata"], s["cache_dir"]
        shared = int(md["shared"]) + int(figs.get("SHARED", 0))
        r = CompiledTile(config=c, dtype=name, target=f"sm_{cc}", shape=(shp[0], shp[1], shp[2]),
                         registers=int(figs["REG"]), spill_bytes=int(figs.get("STACK", 0)), shared_bytes=shared,
                         num_warps=int(md["num_warps"]), num_stages=int(md["num_stages"]),
                         tensor_core_kind=s["tensor_core_kind"], tensor_core_instructions=int(s["tensor_core_instructions"]),
                         ptx_excerpt=s["ptx_excerpt"], cuobjdump=figs, metadata=md, cache_dir=d,
                         cached=i not in todo, seconds=build_s if i in todo else 0.0, limits=limits)
        if limits is not None:
            try:
                r.occ = occupancy(r.registers, r.shared_bytes, r.num_warps, limits)
            except InputError as e:
                r.cannot_run = str(e)
        out.append(r)
    return out


def compile_tile(config: TileConfig, dtype: str = "fp16", target: str | int = "sm_90", **kw) -> CompiledTile:
    """One config: see `compile_many`."""
    return compile_many([config], dtype, target, **kw)[0]


def check_config(config: TileConfig, dtype: str, target: str | int, gpu: str | None = None) -> None:
    """Refuse, before compiling, what cannot run: Triton's software pipeline keeps stages of an A
    tile (BLOCK_M × BLOCK_K) and a B tile (BLOCK_K × BLOCK_N) in shared memory — num_stages of them
    for sm_90 and max(1, num_stages − 1) for sm_80 in Triton 3.9's compiled kernels (e.g.
    128×128×64 fp16, 3 stages: 96 KiB and 64 KiB) — and over the GPU's per-block limit the kernel
    cannot launch. One line naming the limit and what to change. What passes is still checked
    after compiling, against the shared memory the compiler really asked for."""
    cc = parse_target(target)
    limits = limits_for(cc, gpu)
    if limits is None:
        return
    item = ITEMSIZE[dtype_name(dtype)]
    stage = (config.block_m + config.block_n) * config.block_k * item
    extra = 0 if cc >= 90 else 1  # stages beyond those held in shared memory
    kept = max(1, config.num_stages - extra)
    need = kept * stage
    if need > limits.max_shared_bytes_per_block:
        fit = limits.max_shared_bytes_per_block // stage
        fix = (f"use num_stages ≤ {fit + extra} or a smaller BLOCK_K" if fit >= 1
               else "use a smaller BLOCK_K or tile (one stage alone does not fit)")
        raise InputError(
            f"{config.label()} {dtype_name(dtype)} needs at least {need / 1024:.0f} KiB of shared memory per block "
            f"({kept} stage(s) × (A {config.block_m}×{config.block_k} + B {config.block_k}×{config.block_n}) × {item} B), "
            f"over {limits.name}'s {limits.max_shared_bytes_per_block / 1024:.0f} KiB: {fix}")


# ---------------------------------------------------------------- waves

def waves(r: CompiledTile, m: int, n: int, k: int, sms: int | None = None):
    """Lesson 04's wave model (perflab.gemm.shapes.wave_model) with the compiled kernel's tile and
    its resident blocks per SM."""
    from perflab.gemm.shapes import wave_model

    if r.occ is None or r.limits is None:
        raise InputError(r.cannot_run or f"no per-SM limits for {r.target}: waves need a GPU from the table (--gpu)")
    return wave_model(m, n, k, sms=sms or r.limits.sm_count, tile=(r.config.block_m, r.config.block_n),
                      blocks_per_sm=r.occ.blocks_per_sm)


def staircase(r: CompiledTile, dim: str, values, fixed: dict[str, int], sms: int | None = None):
    """The predicted staircase (tiles, waves, utilization per size) of the compiled kernel."""
    from perflab.gemm.shapes import staircase as _staircase

    if r.occ is None or r.limits is None:
        raise InputError(r.cannot_run or f"no per-SM limits for {r.target}")
    return _staircase(dim, values, fixed, sms=sms or r.limits.sm_count, tile=(r.config.block_m, r.config.block_n),
                      blocks_per_sm=r.occ.blocks_per_sm)


def report(r: CompiledTile, shape: tuple[int, int, int] | None = None) -> JSON:
    """The figures `perflab kernel --json` prints."""
    d = r.as_dict()
    d["ptx_excerpt"] = r.ptx_excerpt
    if r.limits is not None:
        d["gpu_name"] = r.limits.name
        d["sms"] = r.limits.sm_count
    if shape is not None and r.occ is not None:
        w = waves(r, *shape)
        d.update(m=shape[0], n=shape[1], k=shape[2], tiles=w.tiles, waves=w.waves, wave_size=w.wave_size,
                 wave_efficiency=w.wave_utilization, tile_efficiency=w.tile_utilization, utilization=w.utilization)
    return d


def as_json(r: CompiledTile) -> str:
    return json.dumps({k: v for k, v in asdict(r).items() if k not in {"limits", "occ"}}, default=str)


if __name__ == "__main__":
    sys.exit(_worker_main())
