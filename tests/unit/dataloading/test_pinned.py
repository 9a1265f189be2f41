"""Tests of `perflab.dataloading.pinned`."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from perflab.dataloading import pinned


class FakeStreams:
    """Streams that log what run_steps asks of them; 'main' is the current stream."""

    def __init__(self):
        self.log: list[tuple] = []
        self.on = "main"
        self.made = 0

    def current(self):
        return "main"

    def new(self):
        self.made += 1
        return f"side{self.made}"

    @contextlib.contextmanager
    def use(self, stream):
        before, self.on = self.on, stream
        try:
            yield
        finally:
            self.on = before

    def copy(self, host, non_blocking):
        self.log.append(("copy", host, self.on, non_blocking))
        return f"dev{host}"

    def wait(self, waiter, waitee):
        self.log.append(("wait", waiter, waitee))

    def record(self, tensor, stream):
        self.log.append(("record", tensor, stream))


def _run(name, n=3):
    fake = FakeStreams()
    steps = []

    def step(batch):
        fake.log.append(("step", batch, fake.on))
        steps.append(batch)

    blocked = pinned.run_steps(list(range(n)), step, fake, pinned.variant(name))
    return fake, steps, blocked


def test_cpu_explanation_says_why_pinning_does_nothing_here():
    from perflab.dataloading import pinned

    text = pinned.cpu_explanation()
    assert text.startswith("No CUDA device here: pin_memory=True has nothing to speed up")
    assert "measure_variants()" in text


def test_side_stream_copies_the_next_batch_before_this_step_and_guards_it():
    fake, steps, blocked = _run("pinned + non_blocking + side stream")
    assert steps == ["dev0", "dev1", "dev2"] and len(blocked) == 3 and fake.made == 1
    assert fake.log == [
        ("copy", 0, "side1", True),
        ("wait", "main", "side1"), ("record", "dev0", "main"), ("copy", 1, "side1", True), ("step", "dev0", "main"),
        ("wait", "main", "side1"), ("record", "dev1", "main"), ("copy", 2, "side1", True), ("step", "dev1", "main"),
        ("wait", "main", "side1"), ("record", "dev2", "main"), ("step", "dev2", "main"),
    ]


def test_every_batch_is_waited_for_and_recorded_before_its_step_and_copied_on_the_side():
    fake, _, _ = _run("pinned + non_blocking + side stream", n=6)
    log = fake.log
    for i in range(6):
        use = log.index(("step", f"dev{i}", "main"))
        copied = next(k for k, e in enumerate(log) if e[0] == "copy" and e[1] == i)
        waits = [k for k, e in enumerate(log) if e[0] == "wait" and copied < k < use]
        assert waits, f"batch {i} is read before the compute stream waits for its copy"
        assert ("record", f"dev{i}", "main") in log[copied:use]
        assert log[copied][2] != "main"
        if i + 1 < 6:  # the next copy is queued before this step, so the two can overlap
            assert next(k for k, e in enumerate(log) if e[0] == "copy" and e[1] == i + 1) < use


@pytest.mark.parametrize("name", [v.name for v in pinned.VARIANTS if not v.side_stream])
def test_one_stream_variants_copy_on_the_current_stream_with_no_wait_or_record(name):
    fake, steps, _ = _run(name)
    v = pinned.variant(name)
    assert fake.made == 0 and steps == ["dev0", "dev1", "dev2"]
    assert {e[0] for e in fake.log} == {"copy", "step"}
    assert all(e[2] == "main" for e in fake.log)
    assert all(e[3] is v.non_blocking for e in fake.log if e[0] == "copy")


def test_run_steps_with_no_batch_does_nothing():
    fake = FakeStreams()
    assert pinned.run_steps([], lambda b: None, fake, pinned.VARIANTS[-1]) == [] and fake.log == []


def test_variants_are_the_four_of_the_two_by_two_plus_the_side_stream():
    keys = [(v.pinned, v.non_blocking, v.side_stream) for v in pinned.VARIANTS]
    assert sorted(keys[:4]) == [(False, False, False), (False, True, False), (True, False, False), (True, True, False)]
    assert keys[4] == (True, True, True) and len(set(v.name for v in pinned.VARIANTS)) == 5
    with pytest.raises(ValueError, match="side stream"):
        pinned.Variant("pageable + side stream", False, True, True, "", "")
    with pytest.raises(pinned.InputError, match="unknown copy variant"):
        pinned.variant("pinned + magic")
    table = pinned.variant_table()
    assert list(table["variant"]) == [v.name for v in pinned.VARIANTS]
    one_stream = table[~table["variant"].str.contains("side")]
    assert all("then compute" in d for d in one_stream["the device"])  # no overlap without a side stream
    assert "during this compute" in table["the device"].iloc[-1]


def test_prediction_sums_on_one_stream_and_takes_the_longer_on_two():
    for v in pinned.VARIANTS:
        assert pinned.predict_step_s(v, 3e-3, 5e-3) == pytest.approx(5e-3 if v.side_stream else 8e-3)
    with pytest.raises(ValueError):
        pinned.predict_step_s(pinned.VARIANTS[0], -1.0, 1.0)


def test_overlap_fraction_and_units():
    assert pinned.overlap_fraction(3.0, 5.0, 8.0) == 0.0  # in turn
    assert pinned.overlap_fraction(3.0, 5.0, 5.0) == 1.0  # fully hidden
    assert pinned.overlap_fraction(3.0, 5.0, 6.5) == pytest.approx(0.5)
    assert pinned.overlap_fraction(0.0, 5.0, 5.0) == 0.0
    assert pinned.gb_per_s(55_430_000_000, 1.0) == pytest.approx(55.43)  # decimal GB, as nvbandwidth
    assert pinned.gb_per_s(1 << 30, 0.5) == pytest.approx(2.147483648)
    with pytest.raises(ValueError):
        pinned.gb_per_s(1, 0.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_gpu_measurements_refuse_in_one_line_on_cpu():
    for fn in (pinned.measure_variants, pinned.measure_2x2, lambda: pinned.pin_cost(1 << 20)):
        with pytest.raises(pinned.UnsupportedError, match="CUDA"):
            fn()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_copy_variant_is_measured_on_a_gpu():
    # which variant is faster, and by how much they overlap, depends on who else uses the GPU: only
    # what load cannot change is asserted (every variant measured, the overlap computed from its times)
    rows = {r.variant: r for r in pinned.measure_variants(64 << 20, 4096, 8)}
    assert set(rows) == {v.name for v in pinned.VARIANTS}
    assert all(r.step_s > 0 and r.h2d_gb_per_s > 0 and math.isfinite(r.overlap) for r in rows.values())
    cost = pinned.pin_cost(64 << 20)
    assert cost.is_pinned and cost.pin_s > 0


def test_measured_table_and_pin_line_carry_units():
    row = pinned.VariantRun("pinned", True, False, False, 64 << 20, 24.81234, 2.7e-3, 4e-3, 6.5e-3, 6.7e-3, 2.5e-3, 0.0)
    t = pinned.measured_table([row])
    assert list(t.columns)[1] == "copy (GB/s)" and t.iloc[0]["copy (GB/s)"] == "24.8"
    assert "ms" in t.iloc[0]["step"] and t.iloc[0]["overlap (of the shorter)"].endswith("%")
    line = pinned.pin_cost_line(pinned.PinCost(1 << 30, 0.2, 5.37, True, 0.02, 10.0))
    assert "1.07 GB" in line and "200 ms" in line and "10.0× the time of the pinned copy" in line


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and non_blocking copies need a CUDA GPU")
def test_the_four_pin_and_non_blocking_cases_are_measured_on_gpu():
    from perflab.dataloading import pinned

    rows = {(r.pin_memory, r.non_blocking): r for r in pinned.measure_2x2(64 << 20, 2048, 5)}
    # which is fastest depends on who else uses the GPU: all four are measured
    assert set(rows) == {(a, b) for a in (True, False) for b in (True, False)}
    assert all(r.h2d_gb_per_s > 0 for r in rows.values())


def test_the_lessons_demo_on_a_cpu_shows_the_published_2x2():
    import torch

    from perflab.dataloading import pinned

    if torch.cuda.is_available():
        return
    d = pinned.demo(1 << 20, 2, 1 << 20)
    assert d.rows == () and d.measured_copies() is None
    assert d.text().startswith("No CUDA device here") and "Published: NVIDIA A100 80GB PCIe" in d.text()
    t = d.table()
    assert list(t.columns) == ["pin_memory", "non_blocking", "average time per iteration (published)"]
    assert t.iloc[0, 2] == "459 ms"
