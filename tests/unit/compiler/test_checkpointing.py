"""Tests of `perflab.compiler.checkpointing`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from perflab.compiler import checkpointing
from perflab.core.errors import InputError
from perflab.flops.mfu import Basis
from perflab.workload.models import build_model, preset
from perflab.workload.train import make_batches, next_token_loss


@pytest.mark.parametrize("kind", ["full", "selective"])
def test_checkpointing_gives_the_same_gradients(kind):
    cfg = preset("tiny-gpt")
    batch = make_batches(cfg, 2, 16)[0]
    grads = []
    for k in ("none", kind):
        m = checkpointing.apply(build_model(cfg), k)
        next_token_loss(m(batch[0]), batch[1]).backward()
        grads.append(m.embed.weight.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_selective_policy_saves_matmuls_only():
    from torch.utils.checkpoint import CheckpointPolicy

    assert checkpointing.save_matmuls_policy(None, torch.ops.aten.mm.default) == CheckpointPolicy.MUST_SAVE
    assert checkpointing.save_matmuls_policy(None, torch.ops.aten.gelu.default) == CheckpointPolicy.PREFER_RECOMPUTE


def test_checkpointing_flops_full_recomputes_selective_does_not():
    cfg = preset("tiny-llama")
    none, full, sel = (checkpointing.hardware_flops(cfg, 2, 64, k) for k in checkpointing.KINDS)
    assert none[0] == full[0] == sel[0]  # model FLOPs do not depend on checkpointing
    assert sel[1] == none[1] < full[1]  # selective saves the matmuls: no matmul FLOP recomputed


def test_checkpointing_measure_full_keeps_less_memory_than_none():

    cfg = dataclasses.replace(preset("tiny-llama"), layers=1)  # one block: two dynamo traces stay quick
    given = {"fp32": Basis(1.0, "given peak", "fp32", "a test's peak")}
    rows = checkpointing.measure(cfg, make_batches(cfg, 2, 64, n=1), steps=1, kinds=("none", "full"),
                                 backend="eager", bases=given)
    by = {(r.checkpointing, r.compiled): r for r in rows}
    assert len(by) == 4
    # full checkpointing drops the block's activations: its forward+backward peak is lower (measured:
    # ~0.8×; the gradients and logits, the same in both, are most of this small model's peak)
    for compiled in (False, True):
        full, none = by[("full", compiled)], by[("none", compiled)]
        assert full.peak_bytes < 0.9 * none.peak_bytes
        hfu, mfu = full.hfu, full.mfu
        assert hfu is not None and mfu is not None and hfu > mfu
        # the one utilization rule: the step's FLOPs over the time the basis would take (1 TFLOP/s here)
        assert mfu == pytest.approx(full.model_flops / 1e12 / full.step_s)
    assert all(r.mfu is None for r in checkpointing.measure(cfg, make_batches(cfg, 2, 64, n=1), steps=1,
                                                               kinds=("none",), backend="eager"))
    table = checkpointing.beside_published(rows, model=cfg.name, device_name="cpu", peak_label="given")
    assert list(table["source"]).count("measured here") == 4 and "published: pytorch.org/blog/maximizing-training-throughput" in set(table["source"])


def test_a_checkpointed_block_runs_plainly_without_grad():
    lin = torch.nn.Linear(3, 2)
    block = checkpointing.Checkpointed(lin, selective=True)
    x = torch.ones(4, 3)
    with torch.no_grad():
        out = block(x)
    assert torch.equal(out, lin(x).detach()) and not out.requires_grad


def test_checkpointing_refuses_unknown_kinds_and_models_without_blocks():
    with pytest.raises(InputError, match="^unknown checkpointing 'some': use one of none, full, selective$"):
        checkpointing.apply(torch.nn.Linear(2, 2), "some")
    with pytest.raises(InputError, match="^checkpointing wraps a model's `blocks` \\(an nn.ModuleList\\); Linear has none$"):
        checkpointing.apply(torch.nn.Linear(2, 2), "full")
    with pytest.raises(InputError, match="^unknown checkpointing 'half': use one of none, full, selective$"):
        checkpointing.hardware_flops(None, 1, 8, "half")


def _run(kind, compiled, peak):
    return checkpointing.CheckpointRun(kind, compiled, 0.01, peak, 10, 12, None, None)


def test_the_lowest_memory_is_read_from_the_eager_rows():
    rows = [_run("none", False, 300), _run("none", True, 100), _run("full", False, 200), _run("selective", False, 250)]
    assert checkpointing.lowest_memory(rows) == "full"


def test_the_lessons_study_measures_every_kind_at_its_size():
    from perflab.compiler.sizes import SIZES

    size = SIZES["smoke"]
    st = checkpointing.study(preset(size.model), size, "cpu", backend="eager")
    assert [(r.checkpointing, r.compiled) for r in st.rows] == [(k, c) for k in checkpointing.KINDS for c in (False, True)]
    assert st.describe().startswith(f"tiny-llama (1 layer), batch {size.ck_batch} × seq {size.ck_seq}, fp32, compiled "
                                    "with the eager backend")
    assert st.lowest_memory() == "full" and len(st.table()) == 6
    assert all(line.startswith(("machine quiet", "disturbed: ", "quietness unknown")) for line in st.table()["machine"])
    assert list(st.beside_published("cpu")["source"]).count("measured here") == 6
