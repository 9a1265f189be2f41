"""The measuring core's edges no lesson reaches on this machine: other CPUs' vector units, input
checks, the lab-grading objects' read-outs, TF32's switch, readouts of missing values."""

import dataclasses

import pytest
import torch

from perflab.core import dtypes, grading, readout, roofline, validate
from perflab.core.device import CPUFacts
from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError, MultipleChoice, Summary, Verdict
from perflab.core.hardware import cpu_flops_per_cycle, cpu_peak_estimate
from perflab.core.measure import tf32_mode

X86 = CPUFacts(model="test CPU", vendor="GenuineIntel", arch="x86_64", family=6, cpu_model=85, logical_cpus=4,
               physical_cores=2, usable_cpus=4, usable_cores=2, flags=frozenset(), clock_mhz=2000.0,
               clock_source="test", numa_nodes={0: "0-3"}, l2_bytes_per_core=None, l3_bytes=None)


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


@pytest.mark.parametrize("value, want", [(4.0, 4), ("+8", 8), (" 16 ", 16)])
def test_positive_int_takes_whole_numbers_written_otherwise(value, want):
    assert validate.positive_int("batch", value) == want


@pytest.mark.parametrize("value", [2.5, "eight", None, True])
def test_positive_int_refuses_what_is_not_a_whole_number(value):
    with pytest.raises(InputError, match=f"batch must be a whole number ≥ 1 \\(got {value!r}\\)"):
        validate.positive_int("batch", value)


def test_multiple_of_suggests_the_neighbours():
    with pytest.raises(InputError, match="m=40 must be a multiple of 16: try 32 or 48"):
        validate.positive_int("m", 40, multiple_of=16)
    with pytest.raises(InputError, match="m=10 must be a multiple of 16: try 16$"):
        validate.positive_int("m", 10, multiple_of=16)


def test_tf32_mode_sets_and_restores_the_switch():
    before = torch.backends.cuda.matmul.allow_tf32
    with tf32_mode(not before):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before)
    assert torch.backends.cuda.matmul.allow_tf32 is before


def test_dtype_reasons_for_apple_gpus_and_other_devices():
    assert "Apple GPUs" in dtypes.unsupported_reason("fp64", torch.device("mps"))
    assert dtypes.unsupported_reason("bf16", torch.device("mps")) is None
    assert "device type 'meta'" in dtypes.unsupported_reason("fp32", torch.device("meta"))


def test_verdict_compares_hashes_and_prints():
    assert Verdict(True) == Verdict(True) and Verdict(False) == False  # noqa: E712 - a check's result against a bool
    assert Verdict(True).__eq__("yes") is NotImplemented
    assert len({Verdict(True), Verdict(True), Verdict(False)}) == 2
    assert repr(Verdict(True)) == "Verdict(passed)" and repr(Verdict(False)) == "Verdict(not done)"


def test_an_empty_summary_says_so():
    assert str(Summary()) == "no checks ran yet" and Summary()._repr_html_() == "<p>no checks ran yet</p>"


def test_multiple_choice_refuses_a_broken_key_and_reads_a_string_of_letters(capsys):
    with pytest.raises(ValueError, match="one correct option per question"):
        MultipleChoice("q", ["a?", "b?"], ["x", "y", "z"], correct=[0])
    with pytest.raises(ValueError, match="outside the options"):
        MultipleChoice("q", ["a?"], ["x", "y"], correct=[2])
    quiz = MultipleChoice("fixes", ["slow input?", "too many syncs?"], ["more workers", "drop .item()", "bigger batch"],
                          correct=[0, 1], user="alice")
    assert quiz.check(", ".join(quiz.answer_key()))
    with pytest.raises(LabCheckError, match="2 answers needed, one letter per question, got 1"):
        quiz.check("a")
    text = str(quiz)
    assert text.startswith("fixes\nquestions:\n  1. slow input?") and "options:" in text
    assert all(f"  {ltr}) " in text for ltr in "abc")


def test_roofline_refuses_an_unknown_elementwise_op():
    with pytest.raises(ValueError, match="op must be 'add' or 'mul'"):
        roofline.elementwise_flops_and_bytes(1024, 4, "div")


def test_readouts_of_missing_and_extreme_values():
    assert readout.num(True) == "True" and readout.num(float("nan")) == "n/a"
    assert readout.num(float("inf")) == "∞" and readout.num(float("-inf")) == "-∞"
    assert readout.seconds(None) == "n/a" and readout.seconds(2.5) == "2.50 s" and readout.seconds(3e-9) == "3.00 ns"
    assert readout.nbytes(None) == "–"
    r = readout.Readout("t", [("a", "1")], ["noisy: spread 30 %"])
    assert r.noisy and r.as_dict() == {"a": "1"}


def test_grading_learner_falls_back_without_a_user_name(monkeypatch):
    import getpass

    def no_user():
        raise KeyError("uid not found")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert grading.learner() == "learner"


def test_device_info_rows_skip_missing_values_and_show_small_sizes():
    from perflab.core.device import DeviceInfo
    from perflab.core.readout import binary_bytes

    info = DeviceInfo("cuda", "test GPU", 1, {"l2_bytes": 4096, "driver": None, "links": []})
    assert info.torch_device == torch.device("cuda", 1)
    assert info.table() == [("device", "cuda:1"), ("name", "test GPU"), ("l2", "4 KiB")]
    assert binary_bytes(2048) == "2 KiB"


def test_memory_sizes_from_text_and_without_proc(monkeypatch):
    from perflab.core import device

    assert device._parse_size("") is None and device._parse_size("unknown") is None
    assert device._parse_size("512K") == 512 * 2**10
    monkeypatch.setattr(device, "_read", lambda path: None)  # no /proc (macOS): psutil's figures instead
    mem = device._meminfo()
    assert mem["MemTotal"] >= mem["MemAvailable"] > 0
    assert device.free_memory_bytes("mps") is None


def test_sweep_summary_says_how_to_resume_and_torn_lines_are_skipped(tmp_path):
    from perflab.core.results import SweepResult, jsonable, load_rows

    s = SweepResult(tmp_path / "x.jsonl", [], measured=2, skipped=1, failed=0, interrupted=True)
    assert s.summary().endswith("interrupted: run the same sweep again to resume")
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n{"a": 2\n\n{"a": 3}\n')  # a line torn by a crash mid-write
    assert load_rows(p) == [{"a": 1}, {"a": 3}]
    assert jsonable(torch.tensor(2.5)) == 2.5 and jsonable(torch.device("cpu")) == "cpu" and jsonable(torch.zeros(2)) == [0.0, 0.0]


def test_results_go_to_the_checkout_or_the_users_cache(monkeypatch, tmp_path):
    from perflab.core import results

    monkeypatch.delenv("PERFLAB_RESULTS", raising=False)
    checkout = results.course_checkout()
    assert checkout is not None and results.results_root() == checkout / "results"
    monkeypatch.setattr(results, "course_checkout", lambda: None)  # an installed copy
    monkeypatch.setenv("HOME", str(tmp_path))
    assert results.results_root() == tmp_path / ".cache" / "perflab" / "results"


def test_timing_tolerances_and_refusals():
    from perflab.core import timing

    assert timing.default_tolerance(torch.float64) == 1e-10
    assert timing.default_tolerance(torch.int8) == 1e-1
    with pytest.raises(ValueError, match="warmup_ms must be ≥ 0 and rep_ms > 0"):
        timing.bench(lambda: None, rep_ms=0, device="cpu")


def test_bench_can_flush_the_cache_on_a_cpu_too(monkeypatch):
    from perflab.core import timing

    monkeypatch.setattr(timing, "FLUSH_BYTES", 2**20)  # small: the rule, not the size, is under test
    monkeypatch.setattr(timing, "_flush_buffers", {})
    x = torch.ones(256)
    t = timing.bench(lambda: x.add_(1), warmup_ms=1, rep_ms=5, device="cpu", flush_l2=True)
    assert t.median_s > 0 and x[0] > 1
    assert timing._flush_buffer(torch.device("cpu")).numel() * 4 == timing.FLUSH_BYTES


def test_fp8_is_refused_on_a_cpu_before_any_operand_is_built():
    from perflab.core.measure import make_matmul

    with pytest.raises(Exception, match="fp8 matmuls need an NVIDIA GPU"):
        make_matmul(64, 64, 64, "fp8", device="cpu")


def test_an_apple_gpu_is_described_without_asking_the_device():
    from perflab.core.device import describe

    info = describe("mps")  # a description from torch and the OS only: it works on any machine
    assert info.kind == "mps" and info.name.startswith("Apple GPU (") and info.index is None


def test_diagnose_copes_with_a_learner_function_and_mistake_models_that_raise():
    def student(n, flag):
        if n > 100:
            raise ValueError("too big for my formula")
        return 2 * n

    def bad_model(n, flag):
        raise ZeroDivisionError

    cases = [({"n": 4, "flag": True}, 12), ({"n": 200, "flag": True}, 600)]
    hint = grading.diagnose(student, cases, ({"n": 4, "flag": True}, 12, 8), rtol=1e-9, atol=0,
                            mistakes=[("never", bad_model)], reference=lambda n, flag: 3 * n if flag else n)
    # the case the learner's function fails on is left out, the mistake model that raises is skipped
    assert hint == ("your answer does not change when `flag` changes, but the right one does: the formula "
                    "ignores an input")


def test_perturbed_inputs_of_each_kind_and_an_ignored_flag():
    assert grading._perturbed(True) == [False] and grading._perturbed("text") == []

    def student(n, flag):
        return 3 * n  # ignores the flag

    key = grading._ignored_input(student, lambda n, flag: 3 * n if flag else n, {"n": 4, "flag": True}, 1e-9, 0)
    assert key == "flag"

    def picky(n, flag):
        if n != 4:
            raise ValueError("only 4")
        return 12

    assert grading._ignored_input(picky, lambda n, flag: 3 * n, {"n": 4, "flag": True}, 1e-9, 0) is None


def test_labguard_finds_perflab_answers_however_a_learner_reaches_them():
    from perflab.core import labguard
    from perflab.numa import plan

    class Mine(plan.RankPlan):  # a learner's class deriving from a perflab answer
        pass

    class Wrapped:
        split = staticmethod(plan.split_node)  # perflab's function kept as a staticmethod

    assert labguard.uses_perflab(Mine, [plan.RankPlan]) == ["RankPlan"]
    assert labguard.uses_perflab(Wrapped, [plan.split_node]) == ["split_node"]
    assert labguard.uses_perflab(plan.split_node, [plan.split_node]) == ["split_node"]  # perflab's own function

    def make():
        late = None  # an empty closure cell at definition time is skipped, not an error

        def inner():
            return late

        late = 1
        return inner

    assert labguard.uses_perflab(make(), [plan.split_node]) == []
    assert labguard.close("a", "a", 1e-9, 0) and not labguard.close("a", "b", 1e-9, 0)


def test_name_mistake_skips_a_mistake_formula_that_raises():
    from perflab.core import labguard

    def raises(x):
        raise ZeroDivisionError

    found = labguard.name_mistake([({"x": 2}, 4)], [("broken", raises, "never"), ("doubled", lambda x: 2 * x, "halve it")],
                                  rtol=1e-9, atol=0)
    assert found is not None and found[0] == "doubled"
