"""Tests of `perflab.core.hardware`."""

from __future__ import annotations

import dataclasses

import pytest

from perflab.core import (
    device,
    hardware,
)
from perflab.core.device import CPUFacts
from perflab.core.hardware import accelerators, cpu_flops_per_cycle, cpu_peak_estimate, lookup

X86 = CPUFacts(model="test CPU", vendor="GenuineIntel", arch="x86_64", family=6, cpu_model=85, logical_cpus=4,
               physical_cores=2, usable_cpus=4, usable_cores=2, flags=frozenset(), clock_mhz=2000.0,
               clock_source="test", numa_nodes={0: "0-3"}, l2_bytes_per_core=None, l3_bytes=None)


REQUIRED = ["v100", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "a10", "l4", "l40s",
            "rtx-3090", "rtx-4090", "h100-sxm", "h100-pcie", "h200-sxm", "gh200", "b200", "mi300x"]


def _facts(**kw):
    base = dict(model="x", vendor="GenuineIntel", arch="x86_64", family=6, cpu_model=143, logical_cpus=8, physical_cores=8,
                usable_cpus=8, usable_cores=8, flags=frozenset(), clock_mhz=2000.0, clock_source="test", numa_nodes={0: "0-7"},
                l2_bytes_per_core=None, l3_bytes=None)
    base.update(kw)
    return CPUFacts(**base)


def _field(spec, name):
    return spec.peak(name) if name in hardware.DTYPE_KEYS else getattr(spec, name)


PUBLISHED = [
    # NVIDIA Tesla V100 datasheet (1165301-r5), V100 SXM2 column: double 7.8, single 15.7, tensor 125 TFLOPS,
    # 32/16 GB HBM2, 900 GB/s. Volta whitepaper (WP-08608-001_v1.1) Table 1: 80 SMs, L2 6144 KB.
    ("v100-sxm2-16gb", dict(fp64=7.8, fp32=15.7, fp16=125, memory_gb=16, memory_bandwidth_gbps=900, sm_count=80, l2_mb=6)),
    ("v100-sxm2-32gb", dict(fp64=7.8, fp32=15.7, fp16=125, memory_gb=32, memory_bandwidth_gbps=900, sm_count=80, l2_mb=6)),
    # Same datasheet, V100 PCIe column: double 7, single 14, tensor 112 TFLOPS, 900 GB/s.
    ("v100-pcie-16gb", dict(fp64=7, fp32=14, fp16=112, memory_gb=16, memory_bandwidth_gbps=900, sm_count=80, l2_mb=6)),
    ("v100-pcie-32gb", dict(fp64=7, fp32=14, fp16=112, memory_gb=32, memory_bandwidth_gbps=900, sm_count=80, l2_mb=6)),
    # NVIDIA A100 datasheet (1758950-r4): FP64 9.7, FP32 19.5, TF32 156 | 312*, BF16/FP16 312 | 624*;
    # 1,555 GB/s (40GB PCIe and SXM), 1,935 GB/s (80GB PCIe), 2,039 GB/s (80GB SXM).
    # A100 whitepaper, data-center GPU comparison table: 108 SMs, L2 40960 KB.
    ("a100-sxm-40gb", dict(fp64=9.7, fp32=19.5, tf32=156, bf16=312, memory_gb=40, memory_bandwidth_gbps=1555, sm_count=108, l2_mb=40)),
    ("a100-sxm-80gb", dict(fp64=9.7, fp32=19.5, tf32=156, bf16=312, memory_gb=80, memory_bandwidth_gbps=2039, sm_count=108, l2_mb=40)),
    ("a100-pcie-40gb", dict(fp64=9.7, fp32=19.5, tf32=156, bf16=312, memory_gb=40, memory_bandwidth_gbps=1555, sm_count=108, l2_mb=40)),
    ("a100-pcie-80gb", dict(fp64=9.7, fp32=19.5, tf32=156, bf16=312, memory_gb=80, memory_bandwidth_gbps=1935, sm_count=108, l2_mb=40)),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*, 24 GB GDDR6, 600 GB/s;
    # 72 RT Cores and 288 Tensor Cores = 72 GA10x SMs. No L2 size is published for the A10.
    ("a10", dict(fp32=31.2, tf32=62.5, bf16=125, fp16=125, fp8=None, memory_gb=24, memory_bandwidth_gbps=600, sm_count=72, l2_mb=None)),
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, FP16/BF16 242*, FP8 485* (with sparsity), 24 GB, 300 GB/s.
    # Ada whitepaper v2.1, L4 appendix: 58 SMs.
    ("l4", dict(fp32=30.3, tf32=120 / 2, bf16=242 / 2, fp16=242 / 2, fp8=485 / 2, memory_gb=24, memory_bandwidth_gbps=300, sm_count=58, l2_mb=None)),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 | 366*, BF16/FP16 362.05 | 733*, FP8 733 | 1,466*, 48 GB, 864 GB/s;
    # 18,176 CUDA Cores / 128 per Ada SM = 142 SMs.
    ("l40s", dict(fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733, memory_gb=48, memory_bandwidth_gbps=864, sm_count=18176 // 128, l2_mb=None)),
    # NVIDIA Ampere GA102 whitepaper v2.1, Appendix A, Table 9 (GeForce RTX 3090): FP32 35.6, TF32 Tensor 35.6/71,
    # FP16/BF16 Tensor with FP32 accumulate 71/142, 24 GB GDDR6X, 936 GB/sec, 82 SMs, L2 6144 KB.
    ("rtx-3090", dict(fp32=35.6, tf32=35.6, bf16=71, fp16=71, fp8=None, memory_gb=24, memory_bandwidth_gbps=936, sm_count=82, l2_mb=6)),
    # NVIDIA Ada whitepaper v2.1, Table 2 (GeForce RTX 4090): FP32 82.6, TF32 Tensor 82.6/165.2, FP16/BF16 Tensor with
    # FP32 accumulate 165.2/330.4, FP8 with FP32 accumulate 330.3/660.6, 24 GB, 1008 GB/sec, 128 SMs, L2 73728 KB.
    ("rtx-4090", dict(fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2, fp8=330.3, memory_gb=24, memory_bandwidth_gbps=1008, sm_count=128, l2_mb=72)),
    # NVIDIA H100 whitepaper v1.04, Table 3, H100 SXM5: FP64 33.5, FP32 66.9, TF32 494.7/989.4, FP16/BF16
    # 989.4/1978.9, FP8 1978.9/3957.8, 132 SMs, L2 50 MB. H100 datasheet (2024): 80 GB, 3.35 TB/s.
    ("h100-sxm", dict(fp64=33.5, fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, memory_gb=80, memory_bandwidth_gbps=3350, sm_count=132, l2_mb=50)),
    # NVIDIA H100 datasheet (2022), H100 PCIe column: FP64 26, FP32 51, TF32 756*, BF16/FP16 1,513*, FP8 3,026*,
    # 80 GB, 2 TB/s. H100 whitepaper Table 3, H100 PCIe: 114 SMs, L2 50 MB.
    ("h100-pcie", dict(fp64=26, fp32=51, tf32=756 / 2, bf16=1513 / 2, fp16=1513 / 2, fp8=3026 / 2, memory_gb=80, memory_bandwidth_gbps=2000, sm_count=114, l2_mb=50)),
    # NVIDIA H200 datasheet, H200 SXM column: FP64 34, FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*,
    # 141 GB, 4.8 TB/s. It publishes neither SM count nor L2.
    ("h200-sxm", dict(fp64=34, fp32=67, tf32=989 / 2, bf16=1979 / 2, fp16=1979 / 2, fp8=3958 / 2, memory_gb=141, memory_bandwidth_gbps=4800, sm_count=None, l2_mb=None)),
    # NVIDIA GH200 Grace Hopper Superchip datasheet: FP64 34, FP32 67, TF32 494 | 989*, BF16/FP16 990 | 1,979*,
    # FP8 1,979 | 3,958*; 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at 4.9 TB/s. No SM count or L2 for the enabled GPU.
    ("gh200-96gb", dict(fp64=34, fp32=67, tf32=494, bf16=990, fp16=990, fp8=1979, memory_gb=96, memory_bandwidth_gbps=4000, sm_count=None, l2_mb=None)),
    ("gh200-144gb", dict(fp64=34, fp32=67, tf32=494, bf16=990, fp16=990, fp8=1979, memory_gb=144, memory_bandwidth_gbps=4900, sm_count=None, l2_mb=None)),
    # NVIDIA HGX page, individual Blackwell GPU specifications, HGX B200 column: FP64 37, FP32 75 TFLOPS,
    # TF32 2.2*, FP16/BF16 4.5*, FP8 9* PFLOPS (with sparsity), 180 GB HBM3E, 7.7 TB/s. Earlier this table
    # held TF32 1125 (BF16 / 2, not a published figure) and 8000 GB/s (the DGX B200 8-GPU total / 8).
    ("b200", dict(fp64=37, fp32=75, tf32=2200 / 2, bf16=4500 / 2, fp16=4500 / 2, fp8=9000 / 2, memory_gb=180, memory_bandwidth_gbps=7700, sm_count=None, l2_mb=None)),
    # AMD ROCm docs, 'AMD Instinct MI300 series microarchitecture', MI300X peak table (dense): Vector FP64 81.7,
    # FP32 163.4, TF32 653.7, FP16/BF16 1307.4, FP8 2614.9; 5.3 TB/s. MI300X data sheet: 192 GB HBM3.
    # ROCm 'GPU hardware specifications', MI300X row: 304 CUs (38 per XCD), L2 32 MiB (4 per XCD).
    ("mi300x", dict(fp64=81.7, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, memory_gb=192, memory_bandwidth_gbps=5300, sm_count=38 * 8, l2_mb=4 * 8)),
]


# NVIDIA open-gpu-kernel-modules README.md, "Compatible GPUs" table: the product name the driver reports
# (and CUDA passes on as cudaDeviceProp.name, which torch.cuda.get_device_name returns), with its PCI ID.
DRIVER_NAMES = [
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),     # 20B0
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),     # 20B2
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),    # 20B5
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),    # 20F1
    ("NVIDIA A10", "a10"),                          # 2236
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),          # 2330
    ("NVIDIA H100 PCIe", "h100-pcie"),              # 2331
    ("NVIDIA H200", "h200-sxm"),                    # 2335
    ("NVIDIA GH200 120GB", "gh200-96gb"),           # 2342, the HBM3 superchip (120 GB LPDDR5X)
    ("NVIDIA GH200 480GB", "gh200-96gb"),           # 2342, the HBM3 superchip (480 GB LPDDR5X)
    ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),     # 2348
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),        # 2204
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),        # 2684
    ("NVIDIA L40S", "l40s"),                        # 26B9
    ("NVIDIA L4", "l4"),                            # 27B8
    ("NVIDIA B200", "b200"),                        # 2901, 2909
    # other products in the same table, which must get no record (different chips, clocks or memory)
    ("NVIDIA A100-SXM-64GB", None),                 # 20B3
    ("NVIDIA A800-SXM4-80GB", None),                # 20F3
    ("NVIDIA A10G", None),                          # 2237
    ("NVIDIA A10M", None),                          # 2238
    ("NVIDIA H100 NVL", None),                      # 2321
    ("NVIDIA H800 PCIe", None),                     # 2322
    ("NVIDIA H800", None),                          # 2324
    ("NVIDIA H20", None),                           # 2329
    ("NVIDIA H100", None),                          # 2339: form factor not in the name
    ("NVIDIA H200 NVL", None),                      # 233B
    ("NVIDIA GeForce RTX 3090 Ti", None),           # 2203
    ("NVIDIA GeForce RTX 4090 D", None),            # 2685
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None),   # 2717
    ("NVIDIA L40", None),                           # 26B5
    ("NVIDIA L20", None),                           # 26BA
    ("NVIDIA L2", None),                            # 27B6
    ("NVIDIA GB200", None),                         # 2941
    ("NVIDIA B300 SXM6 AC", None),                  # 3182
]


def test_spec_sheet_peaks_describe_a_figure_and_a_missing_mode():
    from perflab.core.hardware import peaks_for

    peaks = peaks_for(device.DeviceInfo("cuda", "Tesla V100-SXM2-16GB", 0, {}))
    assert peaks.source == "spec sheet" and peaks.spec is not None
    assert peaks.describe("bf16") == ("bf16: no dense bf16 figure for NVIDIA V100 SXM2 16GB in the spec table "
                                      "(no such mode, or none published)")
    assert peaks.describe("fp16") == f"fp16: 125 TFLOP/s dense (NVIDIA V100 SXM2 16GB; {peaks.spec.sources['peak_tflops']})"


@pytest.mark.parametrize("arch, flags, fp32, words", [
    ("x86_64", {"avx"}, 16, "AVX without FMA"),
    ("x86_64", {"sse2"}, 8, "SSE"),
    ("aarch64", set(), 16, "NEON"),
])
def test_vector_unit_rules_of_other_cpus(arch, flags, fp32, words):
    per, basis = cpu_flops_per_cycle(dataclasses.replace(X86, arch=arch, flags=frozenset(flags)))
    assert per["fp32"] == fp32 and per["fp64"] == fp32 // 2 and words in basis


def test_arm_bf16_doubles_and_x86_fp16_units():
    per, _ = cpu_flops_per_cycle(dataclasses.replace(X86, arch="aarch64", flags=frozenset({"bf16"})))
    assert per["bf16"] == 2 * per["fp32"]
    per, _ = cpu_flops_per_cycle(dataclasses.replace(X86, flags=frozenset({"avx512f", "amx_fp16"})))
    assert per["fp16"] == 1024


def test_an_unknown_architecture_has_no_rule_and_no_peak():
    facts = dataclasses.replace(X86, arch="riscv64")
    per, why = cpu_flops_per_cycle(facts)
    assert per == {} and "riscv64" in why
    assert cpu_peak_estimate(facts, threads=2) is None


def test_table_covers_required_chips():
    ids = {a.id for a in accelerators()}
    for want in REQUIRED:
        assert any(i == want or i.startswith(want + "-") for i in ids), want


def test_every_number_has_a_source():
    for a in accelerators():
        for key in ("peak_tflops", "memory", "sm_count", "l2_mb"):
            assert a.sources.get(key), (a.id, key)
        assert "http" in a.sources["peak_tflops"], a.id
        assert a.peak_tflops.get("fp32"), a.id  # every chip has an fp32 rate
        assert a.memory_bandwidth_gbps and a.memory_gb, a.id


@pytest.mark.parametrize("spec", accelerators(), ids=lambda a: a.id)
def test_examples_resolve_to_their_record(spec):
    assert spec.examples, spec.id
    for name in spec.examples:
        got = lookup(name)
        assert got is not None and got.id == spec.id, (name, got and got.id)
        # robust to case and separators
        assert lookup(name.upper().replace(" ", "-")).id == spec.id
        assert lookup(name.lower().replace("-", " ")).id == spec.id


@pytest.mark.parametrize("name", [
    "NVIDIA A10G",                 # AWS variant of GA102: different clocks and memory
    "NVIDIA L40",                  # not the L40S
    "NVIDIA GeForce RTX 3090 Ti",  # not the 3090
    "NVIDIA GeForce RTX 4090 D",   # China variant, fewer SMs
    "NVIDIA H100 NVL",             # 94 GB PCIe pair card
    "NVIDIA H200 NVL",
    "AMD Instinct MI300A",         # the APU
    "NVIDIA A100",                 # form factor unknown: 40/80 GB and SXM/PCIe differ in bandwidth
    "Tesla V100S-PCIE-32GB",
    "NVIDIA GeForce RTX 4080",
    "Some Future GPU 9000",
    "",
])
def test_unknown_or_ambiguous_names_get_no_spec(name):
    assert lookup(name) is None


def test_published_values():
    h100 = lookup("NVIDIA H100 80GB HBM3")
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper v1.04, Table 3, H100 SXM5 column:
    # BF16 Tensor 989.4/1978.9 (dense/sparse), FP32 66.9 (the datasheet rounds to 1,979* and 67), 132 SMs.
    # Before this check the table held the datasheet's rounded FP32 67 and FP64 34 beside the
    # whitepaper's unrounded tensor rates; all peaks now come from the one table.
    assert h100.peak("bf16") == pytest.approx(1979 / 2, rel=1e-3)
    assert h100.peak("fp32") == 66.9 and h100.sm_count == 132
    # NVIDIA H100 datasheet (2024 edition), H100 SXM column: 3.35 TB/s.
    assert h100.memory_bandwidth_gbps == 3350
    pcie = lookup("NVIDIA H100 PCIe")
    # NVIDIA H100 datasheet (2022 edition), H100 PCIe column: BFLOAT16 1,513* (with sparsity), 2 TB/s.
    assert pcie.peak("bf16") == pytest.approx(1513 / 2, rel=1e-3) and pcie.memory_bandwidth_gbps == 2000
    a100 = lookup("NVIDIA A100-SXM4-80GB")
    # NVIDIA A100 datasheet (1758950-r4): BF16 312 | 624*, TF32 156 | 312*, FP32 19.5;
    # 2,039 GB/s (80GB SXM), 1,555 GB/s (40GB), 1,935 GB/s (80GB PCIe).
    assert (a100.peak("bf16"), a100.peak("tf32"), a100.peak("fp32")) == (312, 156, 19.5)
    assert a100.memory_bandwidth_gbps == 2039 and lookup("NVIDIA A100-SXM4-40GB").memory_bandwidth_gbps == 1555
    assert lookup("NVIDIA A100 80GB PCIe").memory_bandwidth_gbps == 1935
    v100 = lookup("Tesla V100-SXM2-32GB")
    # NVIDIA Tesla V100 datasheet (1165301-r5), V100 SXM2 column: tensor performance 125 TFLOPS; no BF16/TF32.
    assert v100.peak("fp16") == 125 and v100.peak("bf16") is None and v100.peak("tf32") is None
    h200 = lookup("NVIDIA H200")
    # NVIDIA H200 datasheet: 141 GB at 4.8 TB/s; BFLOAT16 1,979* (with sparsity), the same as the
    # H100 SXM datasheet's rounded figure, so within 1e-3 of the H100 whitepaper's 989.4.
    assert h200.memory_gb == 141 and h200.memory_bandwidth_gbps == 4800
    assert h200.peak("bf16") == 1979 / 2 and h200.peak("bf16") == pytest.approx(h100.peak("bf16"), rel=1e-3)
    mi = lookup("AMD Instinct MI300X")
    # AMD ROCm docs, MI300 microarchitecture, MI300X peak table: Matrix BF16 1307.4 TFLOPS; 5.3 TB/s;
    # ROCm GPU hardware specifications: 304 CUs.
    assert mi.peak("bf16") == 1307.4 and mi.memory_bandwidth_gbps == 5300 and mi.sm_count == 304


def test_ridge_point_h100():
    # 989.4 TFLOP/s over 3.35 TB/s: about 295 FLOPs per byte
    assert lookup("h100-sxm").ridge_point("bf16") == pytest.approx(295.3, rel=1e-3)


def test_dense_tensor_rates_are_consistent():
    # On NVIDIA data-centre parts tf32 is half of bf16, and fp16 equals bf16. The B200's published
    # TF32 2.2 PFLOPS* is rounded (half of BF16 4.5 PFLOPS* would be 2.25), so it sits 2.2% under;
    # the L40S's printed dense BF16 362.05 sits 1.1% under twice its TF32 183.
    tolerance = {"b200": 0.025}
    for a in accelerators():
        if a.peak("tf32") and a.peak("bf16") and a.id.split("-")[0] in {"a100", "h100", "h200", "gh200", "a10", "l4", "l40s", "b200"}:
            assert a.peak("tf32") == pytest.approx(a.peak("bf16") / 2, rel=tolerance.get(a.id, 0.02)), a.id
        if a.peak("bf16"):
            assert a.peak("fp16") == a.peak("bf16"), a.id


def test_cpu_flops_per_cycle_rules():
    spr = _facts(flags=frozenset({"avx2", "fma", "avx512f", "amx_bf16", "avx512_fp16"}))
    per, basis = cpu_flops_per_cycle(spr)
    assert per["fp32"] == 64 and per["bf16"] == 1024 and per["fp16"] == 128 and "AMX" in basis
    zen4 = _facts(vendor="AuthenticAMD", family=0x19, flags=frozenset({"avx2", "fma", "avx512f", "avx512_bf16"}))
    assert cpu_flops_per_cycle(zen4)[0]["fp32"] == 32
    hsw = _facts(flags=frozenset({"avx", "avx2", "fma"}))
    assert cpu_flops_per_cycle(hsw)[0] == {"fp32": 32, "fp64": 16}
    zen1 = _facts(vendor="AuthenticAMD", family=0x17, cpu_model=1, flags=frozenset({"avx2", "fma"}))
    assert cpu_flops_per_cycle(zen1)[0]["fp32"] == 16


def test_cpu_peak_estimate_shows_its_inputs():
    est = cpu_peak_estimate(_facts(flags=frozenset({"avx2", "fma"}), usable_cores=4), threads=8)
    assert est.cores == 4  # not more cores than the process may use
    assert est.tflops("fp32") == pytest.approx(4 * 2.0e9 * 32 / 1e12)
    text = est.explain("fp32")
    assert "4 cores" in text and "2.00 GHz" in text and "32 FLOP/cycle" in text and "estimate" in text
    assert cpu_peak_estimate(_facts(clock_mhz=None)) is None


def test_peaks_for_unknown_gpu_is_unknown():
    from perflab.core.device import DeviceInfo

    p = hardware.peaks_for(DeviceInfo("cuda", "NVIDIA A10G", 0))
    assert p.source == "unknown" and all(v is None for v in p.tflops.values())
    assert "peak unknown" in p.describe("bf16")
    p = hardware.peaks_for(DeviceInfo("cuda", "NVIDIA H100 PCIe", 0))
    assert p.source == "spec sheet" and p.get("bf16") == 756.5


def test_peaks_for_this_cpu_is_an_estimate():
    from perflab.core.device import describe

    p = hardware.peaks_for(describe("cpu"))
    assert p.source in {"estimate", "unknown"}
    if p.source == "estimate":
        assert p.get("fp32") > 0 and "estimate" in p.describe("fp32")


def test_published_figures_cover_every_record():
    assert sorted(i for i, _ in PUBLISHED) == sorted(a.id for a in accelerators())


@pytest.mark.parametrize(("spec_id", "figures"), PUBLISHED, ids=[i for i, _ in PUBLISHED])
def test_published_figures(spec_id, figures):
    spec = hardware.by_id(spec_id)
    for name, want in figures.items():
        got = _field(spec, name)
        if want is None:
            assert got is None, (spec_id, name, got)
        else:
            assert got == pytest.approx(want, rel=1e-9), (spec_id, name, got, want)


def test_every_source_is_a_document_or_says_why_not():
    for a in accelerators():
        for key, text in a.sources.items():
            assert "http" in text or "not published" in text or "not taken" in text, (a.id, key)
        # a missing figure is never silent: its source says why it is missing
        for key, value in (("sm_count", a.sm_count), ("l2_mb", a.l2_mb)):
            if value is None:
                assert "not published" in a.sources[key] or "not taken" in a.sources[key], (a.id, key)


@pytest.mark.parametrize(("name", "spec_id"), DRIVER_NAMES, ids=[n for n, _ in DRIVER_NAMES])
def test_driver_product_names(name, spec_id):
    got = lookup(name)
    assert (got.id if got else None) == spec_id


@pytest.mark.parametrize(("name", "spec_id"), [
    # Names V100 boards report (the open modules support Turing and later, so these come from tool output:
    # nvidia-smi, torch's _CudaDeviceProperties and llama.cpp logs in public code).
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA Tesla V100-PCIE-16GB", "v100-pcie-16gb"),   # TensorFlow's device log prefixes the vendor
    ("Tesla V100-FHHL-16GB", None),                      # the 150 W single-slot board: lower clocks
    ("Tesla V100S-PCIE-32GB", None),                     # V100S: 130 TFLOPS, 1134 GB/s
    ("Tesla V100-DGXS-32GB", None),
    # ROCm: torch's collect_env prints "AMD Instinct MI300X VF" on SR-IOV guests; amd-smi prints the card
    # series "AMD Instinct MI300X OAM".
    ("AMD Instinct MI300X VF", "mi300x"),
    ("AMD Instinct MI300X OAM", "mi300x"),
    ("AMD Instinct MI325X", None),
    # MLPerf system descriptions spell the 80 GB SXM A100 "NVIDIA A100-SXM-80GB".
    ("NVIDIA A100-SXM-80GB", "a100-sxm-80gb"),
])
def test_other_reported_names(name, spec_id):
    got = lookup(name)
    assert (got.id if got else None) == spec_id


def test_one_lookup_gives_every_peak_with_its_source():
    """Every peak perflab divides by comes through `spec_peak`: a record, its id or torch's name give the
    same figure and datasheet; an unknown chip or a missing mode give no figure and say which."""
    h100 = hardware.by_id("h100-sxm")
    for what in (h100, "h100-sxm", "NVIDIA H100 80GB HBM3"):
        p = hardware.spec_peak(what, "bf16")
        assert p.known and p.tflops == h100.peak("bf16") == pytest.approx(989.4) and p.spec is h100
        assert p.source == f"{h100.name} bf16 dense ({h100.sources['peak_tflops']})"
    unknown = hardware.spec_peak("NVIDIA A10G", "bf16")  # a different chip: never another chip's peak
    assert not unknown.known and unknown.spec is None and "not in perflab's table" in unknown.source
    volta = hardware.spec_peak("v100-sxm2-16gb", "bf16")
    assert volta.tflops is None and volta.spec is not None and "no dense bf16 figure" in volta.source
    assert hardware.spec_peak(None, "fp32").tflops is None
    # the device's table of peaks is built from it, and so is its JSON
    peaks = hardware.peaks_for(device.DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, {}))
    assert peaks.as_dict()["bf16"] == hardware.spec_peak(h100, "bf16").tflops and peaks.spec is h100
