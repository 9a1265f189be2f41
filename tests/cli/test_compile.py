"""The `perflab compile` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

from clirun import perflab


def test_compile_reports_speed_breaks_recompiles_and_parity(monkeypatch):
    """The whole `perflab compile` report, with dynamo's "eager" backend in place of inductor: the same
    graph capture and the same eager-vs-compiled comparisons, without inductor's code generation
    (seconds instead of a minute on this machine)."""
    import torch

    from perflab.compiler import parity, speed

    real_measure, real_check = speed.measure, parity.check
    monkeypatch.setattr(speed, "measure", lambda fn, b, steps, *, mode: real_measure(fn, b, steps, mode=mode,
                                                                                     backend="eager"))
    monkeypatch.setattr(parity, "check", lambda model, b, steps, *, compile_kw: real_check(
        model, b, steps, compile_kw={**compile_kw, "backend": "eager"}))
    try:
        r = perflab("compile", "--preset", "tiny-gpt", "--steps", "2")
    finally:
        torch._dynamo.reset()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == f"tiny-gpt on {'cuda' if torch.cuda.is_available() else 'cpu'}, mode default, checkpointing none"
    assert lines[1].startswith("step: eager ") and "break-even after" in lines[1]
    assert lines[2] == "graph breaks: 0; recompiles: 0"
    # the eager backend runs the captured graph with the same kernels: the losses agree to rounding
    assert lines[3].startswith("parity over 2 steps: max |Δloss| ") and lines[3].endswith("(tolerance 1e-04: ok)")
