"""Published GPU figures: every data file names its source, every published GPU figure its title,
authors, URL, section, hardware and date, and every number a lesson labels Published comes from a
data file (notebooks show them through perflab.course.gpu_figures, never typed in)."""

import json
import re
from pathlib import Path

import pytest

from perflab.core.errors import InputError
from perflab.course import gpu_figures

ROOT = Path(__file__).resolve().parents[2]
DATA_FILES = sorted((ROOT / "perflab").glob("*/data/*.json"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _walk(x):
    if isinstance(x, dict):
        for k, v in x.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from _walk(v)


def _numbers(x) -> set[float]:
    out: set[float] = set()
    for _, v in _walk({"": x}):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.add(round(float(v), 6))
    return out


def test_every_data_file_names_its_source():
    assert DATA_FILES
    for path in DATA_FILES:
        keys = {k.lower() for k, _ in _walk(json.loads(path.read_text()))}
        assert any("source" in k for k in keys) or {"title", "url"} <= keys, f"{path.name} names no source"


def test_every_published_gpu_figure_has_full_provenance():
    figs = gpu_figures.figures()
    assert len({f.id for f in figs}) == len(figs) >= 8
    raw = json.loads((ROOT / "perflab/course/data/published_gpu.json").read_text())["figures"]
    for f in raw:
        for key in gpu_figures.REQUIRED:
            assert f.get(key), f"{f.get('id')}: no {key}"
        assert f["url"].startswith("https://"), f["id"]
        assert all(isinstance(v["value"], (int, float)) and v["value"] > 0 and v["label"] for v in f["values"])
        if f.get("repo_path"):  # owner/name@commit:path, the exact file read
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+", f["repo_path"]), f["id"]


def test_the_figures_the_issue_names_are_there():
    val = {f.id: dict(zip([v["label"] for v in f.values], f.numbers())) for f in gpu_figures.figures()}
    assert val["mamf_bf16"]["NVIDIA H100 SXM"] == 794.5 and val["mamf_fp8"]["NVIDIA H100 SXM"] == 1402.6
    assert val["allreduce_busbw"]["8x H200, NVLS"] == 473.1
    assert val["pcie_h2d"] == {"host to device": 55.43, "device to host": 55.06}
    assert val["compile_speedup_paper"]["training, geometric mean"] == 1.41
    assert list(val["torchtitan_llama31_8b"].values()) == [5762, 6667, 8532]
    # FlashAttention-3's final (v2) abstract: 840 TFLOP/s BF16, 1.3 PFLOP/s FP8 (v1 said 740 and 1.2)
    assert list(val["fa3_h100"].values()) == [840, 1300]


def test_lesson_03s_gpu_memory_figures_are_the_books_printed_outputs_with_their_digits():
    """What `torch.ones(1).cuda()` and NCCL's first barrier cost on someone else's GPU, as the handbook
    prints them (GiB to two decimals): shown where lesson 03 cannot measure them."""
    kernels, nccl = gpu_figures.figure("cuda_kernels_memory"), gpu_figures.figure("nccl_init_memory")
    assert kernels.numbers() == [1.78, 0.90, 0.92, 0.47] and nccl.numbers() == [0.55, 2.00, 2.00, 1.28]
    assert [t for _, t in kernels.rows()] == ["1.78 GiB", "0.90 GiB", "0.92 GiB", "0.47 GiB"]
    assert "A100 80GB" in kernels.hardware and "not stated" in nccl.hardware
    src = json.loads((ROOT / "perflab/memory/data/memory_references.json").read_text())
    assert "gpu_reference_measurements" not in src  # one copy only: the published figures


def test_the_two_socket_numa_figures_are_one_published_mlc_matrix_each():
    """Lesson 08's published server: Intel MLC's latency and read-bandwidth matrices of one two-socket
    Ice Lake node, as published (hpcleuven/VscDocumentation, icelake_mlc.txt at commit bba571e)."""
    from perflab.numa import effect

    lat, bw = gpu_figures.figure("numa_latency"), gpu_figures.figure("numa_bandwidth")
    assert lat.repo_path == bw.repo_path and "8360Y" in lat.hardware and lat.unit == "ns" and bw.unit == "MB/s"
    cells = {f.id: {(v["cpu_node"], v["memory_node"]): v["value"] for v in f.values} for f in (lat, bw)}
    assert cells["numa_latency"] == {(0, 0): 89.2, (0, 1): 142.7, (1, 0): 142.9, (1, 1): 89.0}
    assert cells["numa_bandwidth"] == {(0, 0): 175690.9, (0, 1): 55676.8, (1, 0): 55692.3, (1, 1): 175912.6}
    for f in (lat, bw):  # each label says what its nodes say
        for v in f.values:
            where = "local" if v["cpu_node"] == v["memory_node"] else "remote"
            assert v["label"] == f"cores on node {v['cpu_node']}, memory on node {v['memory_node']} ({where})"
    # the ratios lesson 08 prints and checks the learner's prediction against
    assert effect.remote_over_local(lat.values, "value") == pytest.approx(142.8 / 89.1)
    assert effect.remote_over_local(bw.values, "value") == pytest.approx(55684.55 / 175801.75)


def test_show_keeps_the_measurement_apart_and_labels_the_published_part():
    s = gpu_figures.show("pcie_h2d", measured={"host to device (pinned)": "12.3 GB/s"}, measured_on="cpu box")
    text, page = str(s), s._repr_html_()
    assert text.index("Measured here (cpu box)") < text.index("Published (not measured here)")
    assert "55.43 GB/s" in text and "Stas Bekman" in text and "8x NVIDIA H200" in text
    assert "<i>Published</i>" in page and page.count("<table>") == 2
    assert "Measured" not in str(gpu_figures.show("pcie_h2d"))
    mamf = dict(gpu_figures.figure("mamf_bf16").rows())
    assert mamf["NVIDIA H100 SXM"] == "794.5 TFLOP/s (80% of the spec's 989)"
    # every digit the source gives and no more (89.0 stays 89.0); MLC's MB/s shown as GB/s to 0.1
    lat = dict(gpu_figures.figure("numa_latency").rows())
    assert lat["cores on node 1, memory on node 1 (local)"] == "89.0 ns"
    bw = dict(gpu_figures.figure("numa_bandwidth").rows())
    assert bw["cores on node 0, memory on node 0 (local)"] == "175.7 GB/s"
    assert bw["cores on node 0, memory on node 1 (remote)"] == "55.7 GB/s"
    assert gpu_figures.figure("numa_bandwidth").numbers()[0] == 175690.9  # the data: as published, in MB/s
    assert dict(gpu_figures.figure("mamf_fp8").rows())["NVIDIA H100 SXM"] == "1,402.6 TFLOP/s (71% of the spec's 1,979)"
    with pytest.raises(InputError, match="no published figure"):
        gpu_figures.figure("h100_magic")


def _cells():
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text())["cells"]:
            yield nb.name, cell["cell_type"], "".join(cell["source"])


def test_every_number_a_lesson_labels_published_comes_from_a_data_file():
    known = set().union(*(_numbers(json.loads(p.read_text())) for p in DATA_FILES))
    ids = {f.id for f in gpu_figures.figures()}
    shown = set()
    for name, kind, src in _cells():
        for fid in re.findall(r"gpu_figures\.show\(\s*[\"']([\w-]+)[\"']", src):
            assert fid in ids, f"{name}: no published figure {fid!r}"
            shown.add(name)
        if kind == "markdown" and "Published" in src:
            for m in re.finditer(r"(?<![\w.-])\d[\d,]*\.\d+|(?<![\w.-])\d{3,}(?![\w.-])", src):
                value = round(float(m.group().replace(",", "")), 6)
                assert value in known, f"{name}: {m.group()} is labelled Published but is in no data file"
    lessons = {"00", "03", "06", "07", "08", "10"}
    assert lessons <= {n[:2] for n in shown}, f"lessons without a published GPU figure: {lessons - {n[:2] for n in shown}}"


def test_shown_reads_as_text_not_as_its_fields():
    s = gpu_figures.show("nvlink_pair")
    assert repr(s) == str(s) and not repr(s).startswith("Shown(")


def test_figures_kept_in_two_data_files_agree():
    """MAMF (gemm's table and the GPU figures), nanoGPT's iteration times (lesson 11's file and the GPU
    figures) and torchtitan's 8-GPU FSDP table (lesson 12's file and the GPU figures) are each kept
    twice: the copies must say the same, or a lesson would show two different published numbers."""
    val = {f.id: dict(zip([v["label"] for v in f.values], f.numbers())) for f in gpu_figures.figures()}
    gemm = json.loads((ROOT / "perflab" / "gemm" / "data" / "published_shapes.json").read_text())["mamf"]["rows"]
    both = 0
    for row in gemm:
        fig = val[f"mamf_{row['dtype']}"] if f"mamf_{row['dtype']}" in val else {}
        if row["accelerator"] in fig:
            assert fig[row["accelerator"]] == row["tflops"], (row["accelerator"], row["dtype"])
            both += 1
    assert both >= 4  # A100, H100 and MI300X bf16, H100 fp8 are in both
    tune = {r["id"]: r["value"] for r in json.loads((ROOT / "perflab" / "tune" / "data" / "published_tune.json")
                                                   .read_text())["rows"]}
    assert [round(tune["nanogpt_eager"] * 1e3), round(tune["nanogpt_compiled"] * 1e3)] == \
        list(val["compile_nanogpt"].values())
    titan = json.loads((ROOT / "perflab" / "shard" / "data" / "torchtitan_benchmarks.json").read_text())
    fsdp8 = next(t for t in titan["tables"] if t["id"] == "fsdp_8gpu")
    assert [r[1] for r in fsdp8["rows"]] == list(val["torchtitan_llama31_8b"].values())
