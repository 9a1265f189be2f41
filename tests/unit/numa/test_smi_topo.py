"""Tests of `perflab.numa.smi_topo`."""

from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.numa import plan, smi_topo
from perflab.numa.plan import check_plan
from perflab.numa.smi_topo import (
    GUESS_PAIRS,
    GUESS_SINGLE,
    SMT_GUESS_NOTE,
    infer_smt,
    parse_topo,
    topology_from_topo,
)
from perflab.numa.topology import format_cpulist, parse_cpulist

from .helpers import CORPUS, SMI_4, TOPO

TRACES = CORPUS / "traces"


def one_clean_line(r) -> bool:
    return r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def _variants(tmp: Path) -> dict[str, Path]:
    """Malformed traces, from the corpus."""
    out = {}

    def put(name: str, data: bytes) -> None:
        out[name] = tmp / name
        out[name].write_bytes(data)

    raw = (TRACES / "no_schedule_steps.json").read_bytes()
    put("truncated.json", raw[: len(raw) // 2])
    put("empty.json", b"")
    put("binary.json", bytes(range(256)) * 4)
    put("truncated_gzip.json.gz", gzip.compress(raw)[:500])
    put("no_events_key.json", json.dumps({"schemaVersion": 1, "events": []}).encode())
    put("no_complete_events.json", json.dumps({"traceEvents": [{"ph": "M", "name": "thread_name"}]}).encode())
    tb = json.loads(gzip.decompress(next((TRACES / "tb_handler_gz").iterdir()).read_bytes()))
    steps_only = [e for e in tb["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    put("steps_only.json", json.dumps({"traceEvents": steps_only}).encode())
    put("exported_after_schedule.json", (TRACES / "exported_after_schedule.json").read_bytes())
    put("a_number.json", b"42")
    return out


EXPECTED_TOPO = json.loads((TOPO / "expected.json").read_text())


def _sysfs(root: Path, nodes: dict[int, list[int]], siblings: dict[int, list[int]]) -> Path:

    cpus = sorted(c for v in nodes.values() for c in v)
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text(format_cpulist(cpus) + "\n")
    for c in cpus:
        d = root / f"devices/system/cpu/cpu{c}/topology"
        d.mkdir(parents=True)
        d.joinpath("thread_siblings_list").write_text(format_cpulist(siblings[c]) + "\n")
    for n, cs in nodes.items():
        d = root / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        d.joinpath("cpulist").write_text(format_cpulist(cs) + "\n")
    return root


PUBLISHED_TOPO = json.loads((TOPO / "published.json").read_text())["tables"]


def _model_file(tmp_path: Path, body: str, name: str = "usermodel.py") -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(body))
    return f


USER_MODELS = '''
    import torch


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            print("block", x.shape)
            return self.lin(x)


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            for _ in range(3):
                x = self.block(x)
            return x


    class NeedsArgs(torch.nn.Module):
        def __init__(self, width):
            super().__init__()


    class Keywords(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale


    class Bad(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(3, 3)


    def thrice():
        return Net(), torch.randn(2, 8)


    def as_list():
        return [Keywords(), torch.randn(2, 8)]


    def as_dict():
        return Keywords(), {"x": torch.randn(2, 8), "scale": 2.0}


    def raises():
        raise RuntimeError("weights file missing")


    def bad_forward():
        return Bad(), torch.randn(2, 8)
'''


TINY_HF = '''
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


    def gpt2():
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
        return GPT2LMHeadModel(cfg).eval()


    def llama():
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
        model = LlamaForCausalLM(cfg).eval()
        ids = torch.randint(0, 128, (2, 16))
        return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
'''


SEED = json.loads((Path(__file__).resolve().parents[3] / "perflab/numa/data/published_topologies.json").read_text())


def test_every_malformed_trace_is_one_clean_line(tmp_path):
    for name, path in _variants(tmp_path).items():
        r = perflab("profile", "--trace", str(path))
        assert one_clean_line(r), (name, r.returncode, r.stdout[-300:], r.stderr)
    r = perflab("profile", "--trace", str(tmp_path / "steps_only.json"))
    assert "no ops" in r.stderr


@pytest.mark.parametrize("name", sorted(EXPECTED_TOPO))
def test_every_table_layout_parses_to_the_same_gpus(name):
    t = parse_topo((TOPO / name).read_bytes().decode())
    assert to_json(t.gpus) == EXPECTED_TOPO[name]
    assert t.links["GPU0"]["GPU7"] == "NV18" and t.links["GPU0"]["GPU0"] == "X"
    assert len(t.nics) == 2 and "NV#" in t.legend


def test_a_blank_cpu_affinity_does_not_shift_the_numa_node_into_it():
    for name in ("blank_cpu_tabs.txt", "blank_cpu_spaces.txt"):
        t = parse_topo((TOPO / name).read_text())
        assert t.gpus[2] == smi_topo.TopoGPU(gpu=2, cpu_affinity=[], numa_node=0)
        topo = topology_from_topo(t, sysfs=None)
        p = plan.plan(8, topo)
        # GPU2 and GPU6 are on nodes 0 and 1: their ranks get CPUs of those nodes
        assert not check_plan(p, topo)
        assert all(topo.node_of(c) == 0 for c in p[2].cpus) and all(topo.node_of(c) == 1 for c in p[6].cpus)


def test_a_table_from_another_machine_says_its_smt_layout_is_a_guess(tmp_path):
    r = perflab("numa", "--plan", "--topo", str(TOPO / "tabs.txt"))
    assert r.returncode == 0 and "GUESS" in r.stdout and "--sysfs" in r.stdout
    r = perflab("numa", "--plan", "--topo", str(TOPO / "tabs.txt"), "--json")
    assert r.returncode == 0 and "GUESS" in r.stderr and isinstance(json.loads(r.stdout), list)
    topo = topology_from_topo(parse_topo((TOPO / "tabs.txt").read_text()), sysfs=None)
    assert topo.notes == [SMT_GUESS_NOTE.format(how=GUESS_PAIRS)]
    odd = parse_topo((TOPO / "tabs.txt").read_text().replace("0-55,112-167", "0-55,112-160"))
    assert topology_from_topo(odd, sysfs=None).notes == [SMT_GUESS_NOTE.format(how=GUESS_SINGLE)]


def test_a_table_of_this_machine_takes_its_smt_siblings_from_sysfs(tmp_path):
    # the same 224 CPUs, but the machine pairs adjacent CPUs (0,1), (2,3), ...: not what the numbering suggests
    nodes = {0: list(range(0, 56)) + list(range(112, 168)), 1: list(range(56, 112)) + list(range(168, 224))}
    sib = {c: [c - c % 2, c - c % 2 + 1] for c in range(224)}
    root = _sysfs(tmp_path / "sys", nodes, sib)
    parsed = parse_topo((TOPO / "tabs.txt").read_text())
    topo = topology_from_topo(parsed, sysfs=root)
    assert topo.notes == [] and topo.siblings[0] == [0, 1] and "sysfs" in topo.source
    p = plan.plan(8, topo)
    cores = [{c // 2 for c in x.cpus} for x in p]  # no physical core shared between two ranks
    assert all(not (cores[i] & cores[j]) for i in range(8) for j in range(i + 1, 8))
    r = perflab("numa", "--plan", "--topo", str(TOPO / "tabs.txt"), "--sysfs", str(root), "--json")
    assert r.returncode == 0 and r.stderr == ""
    other = _sysfs(tmp_path / "other", {0: [0, 1]}, {0: [0], 1: [1]})
    assert one_clean_line(perflab("numa", "--plan", "--topo", str(TOPO / "tabs.txt"), "--sysfs", str(other)))


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOPO))
def test_published_tables_parse_to_what_they_say(name):

    entry = PUBLISHED_TOPO[name]
    assert entry["source"]["title"] and entry["layout"]
    t = parse_topo((TOPO / name).read_bytes().decode())
    want = {}
    for span, v in entry["expected"].items():
        a, b = map(int, span.split("-"))
        want.update({g: {"gpu": g, "cpu_affinity": parse_cpulist(v["cpu_affinity"]), "numa_node": v["numa_node"]}
                     for g in range(a, b + 1)})
    assert to_json(t.gpus) == [want[g] for g in sorted(want)]


def test_a_header_mixing_tabs_and_spaces_names_both_affinity_columns():
    # 8× V100-SXM2 (DGX-1's hybrid cube-mesh), driver 470: "CPU Affinity    NUMA Affinity" in one tab cell
    t = parse_topo((TOPO / "published_v100_sxm2_mixed_header.txt").read_text())
    assert t.links["GPU0"]["GPU1"] == "NV1" and t.links["GPU0"]["GPU3"] == "NV1"
    assert t.links["GPU0"]["GPU4"] == "SYS" and t.links["GPU2"]["mlx5_0"] == "PIX"
    assert t.nics == ["mlx5_0", "mlx5_1"]
    topo = topology_from_topo(t, sysfs=None)
    p = plan.plan(8, topo)
    assert not check_plan(p, topo)
    assert all(topo.node_of(c) == (x.gpu // 4) for x in p for c in x.cpus)


def test_malformed_tables_are_one_clean_line(tmp_path):
    base = (TOPO / "tabs.txt").read_text()
    lines = base.splitlines()
    variants = {
        "garbage.txt": "\x00\x01 not a table at all\n",
        "empty.txt": "",
        "header_only.txt": lines[0] + "\n",
        "short_row.txt": "\n".join(lines[:2] + ["GPU1\tNV18\t X "] + lines[3:]) + "\n",
        "extra_values.txt": "\n".join(lines[:2] + [lines[2] + "\t7\t9\t11"] + lines[3:]) + "\n",
        "bad_cpu_list.txt": base.replace("0-55,112-167", "zero-to-55", 1),
        "squeezed_blank.txt": "\n".join(" ".join(ln.split()) for ln in
                                        (TOPO / "blank_cpu_tabs.txt").read_text().splitlines()) + "\n",
    }
    for name, text in variants.items():
        f = tmp_path / name
        f.write_text(text)
        r = perflab("numa", "--topo", str(f))
        assert one_clean_line(r), (name, r.stdout[-300:], r.stderr)


def test_a_break_in_a_child_called_three_times_is_one_site_with_its_full_reason(tmp_path):
    _model_file(tmp_path, USER_MODELS)
    r = perflab("compile", "--explain", "usermodel:thrice", "--json", cwd=tmp_path)  # MODULE from the current dir
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["graph_breaks"] == 1 and len(out["breaks"]) == 1
    b = out["breaks"][0]
    assert "usermodel.py:11" in b["where"] and "`print`" in b["reason"] and b["hits"] == 3


def test_list_and_dict_inputs(tmp_path):
    f = _model_file(tmp_path, USER_MODELS)
    for fac in ("as_list", "as_dict"):
        r = perflab("compile", "--explain", f"{f}:{fac}", "--json")
        assert r.returncode == 0, (fac, r.stderr)
        assert json.loads(r.stdout)["graph_breaks"] == 0


def test_errors_in_the_users_code_are_theirs_in_one_line(tmp_path):
    f = _model_file(tmp_path, USER_MODELS)
    r = perflab("compile", "--explain", f"{f}:raises")
    assert one_clean_line(r) and "weights file missing" in r.stderr and "usermodel.py:58" in r.stderr
    r = perflab("compile", "--explain", f"{f}:bad_forward")
    assert one_clean_line(r) and "usermodel.py:42" in r.stderr and "your model's error" in r.stderr
    r = perflab("compile", "--explain", f"{f}:NeedsArgs")
    assert one_clean_line(r) and "needs arguments" in r.stderr and "width" in r.stderr
    r = perflab("compile", "--explain", "torch.nn:Linear")
    assert one_clean_line(r) and "in_features" in r.stderr
    r = perflab("compile", "--explain", "no_such_module_here:build", cwd=tmp_path)
    assert one_clean_line(r) and "no module" in r.stderr
    broken = _model_file(tmp_path, "import torch\nx = 1 / 0\n", "broken.py")
    r = perflab("compile", "--explain", f"{broken}:build")
    assert one_clean_line(r) and "ZeroDivisionError" in r.stderr and "broken.py:2" in r.stderr


@pytest.mark.parametrize("factory", ["gpt2", "llama"])
def test_hugging_face_models_built_from_configs(tmp_path, factory):
    pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[test]'")
    f = _model_file(tmp_path, TINY_HF, "hf.py")
    r = perflab("compile", "--explain", f"{f}:{factory}", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["graphs"] >= 1 and out["ops"] > 0 and out["graph_breaks"] == len(out["breaks"])
    assert all(b["reason"] and b["reason"] != "?" for b in out["breaks"])


def test_a_table_realigned_by_hand_is_read_by_character_columns():
    text = ("      GPU0  GPU1  CPU Affinity  NUMA Affinity\n"
            "GPU0   X    NV4   0-3           0\n"
            "GPU1  NV4    X    4-7           1\n")
    parsed = smi_topo.parse_topo(text)
    assert parsed.gpus == [smi_topo.TopoGPU(0, [0, 1, 2, 3], 0), smi_topo.TopoGPU(1, [4, 5, 6, 7], 1)]
    assert parsed.links["GPU0"]["GPU1"] == "NV4"


def test_blank_cells_whose_spacing_does_not_say_their_column_are_refused_in_one_line():
    head = "      GPU0  CPU Affinity  NUMA Affinity   GPU NUMA ID"
    row = "GPU0   X    0-3"
    row += " " * (35 - len(row)) + "0"  # '0' midway between NUMA Affinity and GPU NUMA ID
    with pytest.raises(InputError, match=r"row GPU0 has blank cells and its spacing does not say which column "
                                         r"0-3 0 belong to: save the table as nvidia-smi writes it") as e:
        smi_topo.parse_topo(f"{head}\n{row}\n")
    assert "\n" not in str(e.value)


def test_a_blank_line_under_the_header_and_a_legend_straight_after_the_rows():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n\n"
            "GPU0\t X \tNV4\t0-3\t0\nGPU1\tNV4\t X \t4-7\t1\nLegend:\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
    parsed = smi_topo.parse_topo(text)
    assert [g.numa_node for g in parsed.gpus] == [0, 1]
    assert parsed.legend["X"] == "Self" and "NV#" in parsed.legend


def test_every_numa_affinity_na_gives_one_node_per_distinct_cpu_list():
    text = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tNV4\t0-3\tN/A\nGPU1\tNV4\t X \tNV4\t4-7\tN/A\nGPU2\tNV4\tNV4\t X \t0-3\tN/A\n")
    topo = smi_topo.topology_from_topo(smi_topo.parse_topo(text), sysfs=None)
    assert [(n.id, n.cpus) for n in topo.nodes] == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])]
    assert [(g.index, g.numa_node) for g in topo.gpus] == [(0, 0), (1, 1), (2, 0)]


def test_a_table_naming_cpus_this_sysfs_does_not_have_is_not_this_machine(tmp_path):
    cpu = tmp_path / "devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    def table(cpus, node):
        return smi_topo.TopoTable(["GPU0"], {"GPU0": {"GPU0": "X"}}, [smi_topo.TopoGPU(0, cpus, node)], [], {}, {})

    parsed = table([0, 1, 2, 3, 4, 5], 0)
    assert smi_topo.table_matches_sysfs(parsed, tmp_path) is False
    parsed.gpus[0].cpu_affinity = [0, 1]
    assert smi_topo.table_matches_sysfs(parsed, tmp_path) is True  # no node folders: one node holds them
    assert smi_topo.table_matches_sysfs(parsed, tmp_path / "elsewhere") is False  # no sysfs there
    assert smi_topo.table_matches_sysfs(table([], None), tmp_path) is False


def test_parse_the_handbooks_table():
    t = parse_topo(SEED["h100_8gpu_2socket"]["table"])
    assert [g.numa_node for g in t.gpus] == [0] * 4 + [1] * 4
    assert t.gpus[0].cpu_affinity == list(range(52)) + list(range(104, 156))
    assert t.links["GPU0"]["GPU0"] == "X" and t.links["GPU3"]["GPU7"] == "NV18"
    topo = topology_from_topo(t)
    assert topo.siblings[0] == [0, 104]  # inferred from the numbering
    p = plan.plan(8, topo)
    assert not check_plan(p, topo) and [len(x.cpus) for x in p] == [26] * 8


def test_parse_a_4_gpu_table_with_nic_and_na():
    t = parse_topo(SMI_4)
    assert t.devices == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0"] and t.nics == ["NIC0"]
    assert t.gpus[3] == smi_topo.TopoGPU(3, [], None)
    assert t.links["GPU0"]["NIC0"] == "PIX" and t.legend["NV#"].startswith("Connection traversing a bonded")
    assert t.nic_names == {"NIC0": "mlx5_0"}
    topo = topology_from_topo(t)
    assert [n.id for n in topo.nodes] == [0, 1] and infer_smt(topo.nodes)[0] == [0]
    p = plan.plan(4, topo)
    assert not check_plan(p, topo) and p[3].note  # GPU3's node is unknown


def test_parse_rejects_what_is_not_a_table():
    with pytest.raises(InputError, match="header"):
        parse_topo("hello\nworld\n")
