"""More of the FLOP counter's edges: GPU attention kernels (run on meta tensors, which need no GPU) in
their [b, s, h, d] layout and packed variable-length form, foreach ops, products of zero FLOPs,
ops outside every module in the backward, a backward run inside a module's forward, an estimate
that fails; and the refusals and fallbacks of MFU, the published runs, lab 01/02 and the
measured training step."""

from __future__ import annotations

import pytest
import torch

from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError
from perflab.flops import counter, lab01, lab02, mfu, step
from perflab.flops.counter import count_flops
from perflab.workload.models import preset

aten = torch.ops.aten
TINY = preset("tiny-gpt").with_(layers=1, hidden=32, heads=2, ffn=64, vocab=64, seq_len=16)

# ----------------------------------------------------------------------------- the counter


def test_gpu_attention_kernels_are_counted_in_their_bshd_layout():
    q = torch.empty(2, 5, 3, 4, device="meta", dtype=torch.float16)  # [b, s_q, h, d]
    k = torch.empty(2, 7, 3, 4, device="meta", dtype=torch.float16)  # [b, s_k, h, d]
    c = count_flops(lambda: aten._flash_attention_forward(q, k, k, None, None, 5, 7, 0.0, False, False))
    # scores and values: 2 products of 2·(b·h)·s_q·s_k·d each; read as [b, h, s, d] it would be 1440
    assert c.by_op == {"_flash_attention_forward": 2 * (2 * 6 * 5 * 7 * 4)}
    n, recomputed = counter._sdpa_backward_flops(aten._flash_attention_backward.default, (None, q, k, k))
    assert (n, recomputed) == (4 * (2 * 6 * 5 * 7 * 4), 2 * 6 * 5 * 7 * 4)


def test_packed_variable_length_attention_uses_torchs_formula():
    q = torch.empty(10, 2, 8, device="meta", dtype=torch.float16)  # two sequences, 4 and 6 tokens, packed
    offsets = torch.tensor([0, 4, 10], dtype=torch.int32)
    c = count_flops(lambda: aten._flash_attention_forward(q, q, q, offsets, offsets, 6, 6, 0.0, False, False))
    assert c.total == c.by_phase["forward"] == 2 * (2 * 2 * 8) * (4 * 4 + 6 * 6)


def test_foreach_ops_are_estimated_by_the_elements_they_write():
    a, b = torch.ones(3), torch.ones(5)
    c = count_flops(lambda: torch._foreach_add([a, b], [a, b]))
    assert (c.total, c.other) == (0, 8)
    c = count_flops(lambda: torch._foreach_mul_([a, b], 2.0))  # in place: returns nothing to count
    assert (c.total, c.other) == (0, 0)


def test_a_product_of_zero_flops_is_not_booked():
    c = count_flops(lambda: torch.ones(0, 3) @ torch.ones(3, 4))
    assert (c.total, c.by_op, c.by_module) == (0, {}, {})


def test_an_estimate_that_fails_does_not_break_the_run(monkeypatch):
    def broken(func, args, out):
        raise RuntimeError("no estimate")

    monkeypatch.setattr(counter, "_other_flops", broken)
    c = count_flops(lambda: (torch.ones(2, 3) @ torch.ones(3, 4)).relu())
    assert (c.total, c.other) == (2 * 2 * 3 * 4, 0) and c.result.shape == (2, 4)


def test_backward_work_outside_every_module_is_booked_to_global_only():
    lin = torch.nn.Linear(4, 4, bias=False)
    m1, m2 = torch.ones(2, 3), torch.ones(3, 5)

    def step_with_callback():
        y = lin(torch.ones(3, 4))
        # a callback the engine runs at the end of the backward (as DDP queues one): no autograd node runs it
        y.register_hook(lambda g: torch.autograd.Variable._execution_engine.queue_callback(lambda: m1 @ m2))
        y.sum().backward()

    c = count_flops(step_with_callback)
    assert c.by_module["Linear"]["backward"] == 2 * 3 * 4 * 4  # the weight's gradient
    assert c.by_module["Global"]["backward"] == 2 * 3 * 4 * 4 + 2 * 2 * 3 * 5


def test_a_backward_inside_a_modules_forward_is_counted():
    class InputGradient(torch.nn.Module):  # e.g. a gradient penalty: autograd.grad inside forward
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3, bias=False)

        def forward(self, x):
            (g,) = torch.autograd.grad(self.lin(x).sum(), x)
            return g

    m = InputGradient()
    c = count_flops(m, torch.ones(2, 4, requires_grad=True))
    assert c.by_phase == {"forward": 2 * 2 * 4 * 3, "backward": 2 * 2 * 3 * 4, "recompute": 0}
    assert c.by_module["InputGradient.lin"] == c.by_module["InputGradient"] == c.by_phase
    assert torch.allclose(c.result, torch.ones(2, 3) @ m.lin.weight)


def test_the_table_without_the_global_row():
    lin = torch.nn.Linear(8, 4, bias=False)
    c = count_flops(lambda: lin(torch.ones(3, 8)))
    assert list(c.table(root=False).index) == ["Linear"]
    assert list(c.table().index) == ["Global", "Linear"]


# ----------------------------------------------------------------------------- MFU and published runs


def test_the_ceiling_is_measured_when_perflab_gemm_has_no_search_result(monkeypatch):
    from perflab.core import measure
    from perflab.gemm import mamf

    monkeypatch.delattr(mamf, "measured_ceiling")  # an older perflab.gemm
    monkeypatch.setattr(mfu, "_CEILINGS", {})
    sizes = []

    def measure_matmul(m, n, k, dtype, device, **kw):
        sizes.append((m, n, k, dtype, str(device)))
        return type("R", (), {"tflops": 1.25})()

    monkeypatch.setattr(measure, "measure_matmul", measure_matmul)
    c = mfu.matmul_ceiling("cpu", "fp32", size=64)
    assert (c.tflops, c.source, c.size) == (1.25, "matmul", 64)
    assert c.label == "measured matmul ceiling (largest square matmul measured here: 64³ fp32)"
    assert mfu.matmul_ceiling("cpu", "fp32", size=64) is c and sizes == [(64, 64, 64, "fp32", "cpu")]


def test_published_runs_refuse_a_missing_peak_and_an_unknown_convention():
    with pytest.raises(ValueError, match="^published_runs.json: no bf16 peak for v100-sxm2-16gb in the spec table$"):
        mfu._spec_peak("v100-sxm2-16gb", "bf16")
    with pytest.raises(ValueError, match="^unknown convention 'chinchilla'$"):
        mfu._compute({"inputs": {}, "convention": "chinchilla"}, "mfu")


def test_lab01_reference_tflops():
    assert lab01.reference_tflops(1000, 2000, 500, 0.5) == 2 * 1000 * 2000 * 500 / 0.5 / 1e12 == 0.004


def test_lab02_mfu_check_reports_a_published_figure_the_inputs_do_not_reproduce(monkeypatch):
    original = lab02._palm_case

    def misprinted(run_id):
        run = original(run_id)
        if run_id == "palm-540b":
            run = {**run, "published": {**run["published"], "mfu": 0.471}}
        return run

    monkeypatch.setattr(lab02, "_palm_case", misprinted)

    def student(tokens_per_s, flops_per_token, n_devices, peak_tflops):
        return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)

    with pytest.raises(LabCheckError, match="MFU from throughput: .*'n_devices': 6144, 'peak_tflops': 275.*\\} gives "
                                            "0.4623, the paper prints 0.471"):
        lab02.check_mfu(student)


# ----------------------------------------------------------------------------- a measured step


def test_a_training_step_refuses_other_dtypes():
    with pytest.raises(InputError, match="^training steps run in fp32, bf16 or fp16, not fp64$"):
        step.measure_step(TINY, dtype="fp64", device="cpu")


def test_a_step_whose_attention_runs_unfused_says_so():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        r = step.measure_step(TINY, batch=2, steps=1, warmup=1, ceiling=False, device="cpu")
    assert r.notes == ["attention ran an unfused kernel here (no recomputed scores in its backward)"]
    assert r.counted_flops_per_step == r.hardware_flops_per_step == r.model_flops_per_step


def test_checkpointing_comparison_measures_the_step_without_then_with():
    off, on = step.checkpointing_comparison(TINY, batch=2, steps=1, warmup=0, ceiling=False, verify=False, device="cpu")
    assert (off.checkpointing, on.checkpointing) == (False, True)
    assert on.model_flops_per_step == off.model_flops_per_step
    assert on.hardware_flops_per_step > off.hardware_flops_per_step  # the recomputed forward
