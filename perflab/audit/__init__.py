"""`perflab audit`: the learner's own training step, measured by every lesson's instrument.

    >>> from perflab.audit.target import from_factory, from_hf_config
    >>> from perflab.audit.run import run_audit
    >>> rep = run_audit(from_factory("mystep.py:build"))      # or from_hf_config("gpt2", {"n_layer": 2})
    >>> rep.json                                              # the stable fields (perflab.audit.run.JSON_FIELDS)
    >>> print(rep.summary())

- `target`: what is audited: a factory's model, batches, loss, optimizer and tokens (the contract,
  checked with one-line errors), or a Hugging Face model built from its config with no download
- `run`: `run_audit`, the step timed, its FLOPs counted per phase and dtype, one step profiled, its
  memory by part, its graph breaks; the report's stable JSON fields
- `recommend`: which rungs of the capstone apply, ordered by the time they act on, and `--try`
- `energy`: joules of the timed steps from NVML or RAPL, or a line saying why not
- `text`: the terminal summary
- `trace`: `perflab audit --trace DIR`, a whole job read from its ranks' profiler traces: step time,
  HolisticTraceAnalysis's temporal and idle-time breakdowns, exposed communication, stragglers and the
  waits they cost, MFU at the peak of the GPU the traces name
- `examples`: a small step to audit (perflab's tiny GPT fed by a slow DataLoader), for lab 11

Uses other topics' formulas and measurements, never their figures, widgets or lab checks:
perflab.flops (the attention-aware FLOP counter, per dtype, and MFU's one basis per dtype), perflab.memory (lesson 03's estimate,
the allocation probe, saved tensors), perflab.gemm (the maximum achievable matmul search),
perflab.profiling (reading a trace: op self times), perflab.compiler (graph breaks and the one-line
error of the user's code) and perflab.tune (the rungs, the waterfall of a profiled step, bf16 and
fused-AdamW availability, parity tolerances).
"""

from perflab._lazy import lazy_modules

MODULES = ("target", "run", "recommend", "energy", "text", "examples", "trace")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
