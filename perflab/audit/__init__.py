"""`perflab audit`: the learner's own training step, measured by every lesson's instrument.

    >>> from perflab.audit.target import from_factory, from_hf_config
    >>> from perflab.audit.run import run_audit
    >>> rep = run_audit(from_factory("mystep.py:build"))      # or from_hf_config("gpt2", {"n_layer": 2})
    >>> rep.time.step_s, rep.utilization.mfu, rep.waterfall.largest()   # a typed report (perflab.audit.report)
    >>> rep.to_json()                                         # the stable fields (perflab.audit.report.JSON_FIELDS)
    >>> print(rep.summary())

The audit of a step:

- `target`: what is audited: a factory's model, batches, loss, optimizer and tokens (the contract,
  checked with one-line errors), or a Hugging Face model built from its config with no download
- `run`: `run_audit`, the phases in order: the step timed, its FLOPs counted, a few steps profiled, its
  memory, its graph breaks, the rungs that apply
- `report`: the audit as a typed object (the step's timing, the FLOPs and MFU with their basis, the
  waterfall, top ops, memory, graph breaks, energy, recommendations, notes), its terminal summary, and
  its JSON made once, at the edge (`AuditReport.to_json`, exactly `JSON_FIELDS`)
- `work`: parameters (total, active), 6N·T and the terms of its gap to the counted FLOPs, float64's cost
- `ops`: each aten op's calls and bytes, the top ops against this device's roofline, the ops the FLOP
  counter has no formula for
- `fp8`: where fp8 would pay: the step's GEMMs by shape, calls and share of its matmul FLOPs, each
  predicted in bf16 and in fp8 (casts included) on a chosen GPU, with the gain per GEMM and for the
  step's matmuls in all, and the datasheets behind it
- `memory`: memory by part beside lesson 03's estimate
- `breaks`: the loss's graph breaks (lesson 10)
- `recommend`: which rungs of the capstone apply, ordered by the time they act on, and `--try`
- `energy`: joules of the timed steps from NVML or RAPL, or a line saying why not
- `examples`: small steps to audit (perflab's tiny GPT fed by a slow DataLoader, for lab 11; any of
  perflab's model configs on random tokens, for lesson 16)

A job that ran, from its ranks' profiler traces (`perflab audit --trace DIR`):

- `trace`: the job: its ranks' traces checked to be one job, each rank's row, MFU at the peak of the
  GPU the traces name
- `job`: the job audit as a typed report (`JobReport`), its table, its terminal report and its JSON
- `rank_trace`: one rank's trace read: its steps, its GPU events classified as HTA classifies them
- `hta`: HolisticTraceAnalysis's temporal and idle-time breakdowns, and each step's exposed communication
- `stragglers`: across ranks, the stragglers (robust z-score) and the waits they cost in collectives

Uses other topics' formulas and measurements, never their figures, widgets or lab checks:
perflab.flops (the attention-aware FLOP counter, per dtype, and MFU's one basis per dtype), perflab.memory (lesson 03's estimate,
the allocation probe, saved tensors), perflab.gemm (the maximum achievable matmul search),
perflab.profiling (reading a trace: op self times), perflab.compiler (graph breaks and the one-line
error of the user's code), perflab.tune (the rungs and the parts of the step each acts on, the
waterfall of a profiled step with its categories and labels, bf16 and fused-AdamW availability, parity
tolerances) and perflab.numerics (lesson 16's roofline prediction of one GEMM in bf16 and in fp8).
"""

from perflab._lazy import lazy_modules

MODULES = ("target", "run", "report", "work", "ops", "fp8", "memory", "breaks", "recommend", "energy", "examples",
           "trace", "job", "rank_trace", "hta", "stragglers")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
