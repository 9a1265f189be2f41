"""Lesson 11 (the capstone): one training step made fast, rung by rung, each rung measured and checked.

- `ladder`: the ladder as data (each rung: its name, what it changes, the lesson that explains it)
  and the presets (a GPT-2-small-class step per device: full GPT-2 small on a GPU, a CPU size)
- `runner`: the ladder: applies rungs cumulatively to one step, measures each interleaved with the
  step before it, saves each rung as it is measured (shared by lesson 11, lab 11 and `perflab tune`)
  and resumes
- `config`: a configuration of the step (what the rungs change) and what it builds: the model, its
  AdamW form, the workload's training step and the loader of slow token ids
- `changes`: each rung as a change to the configuration, or why it does not apply here (the memory
  rungs follow lesson 03's estimator)
- `measure`: one configuration measured, alone or interleaved with another (step time, peak bytes,
  losses, the waterfall)
- `rows`: a rung's saved row: MFU/HFU against its dtype's basis, loss parity against the baseline,
  the verdict and the sentences that explain it
- `verdict`: a rung's verdict with a stated confidence (interleaved pairs, the sign test's interval
  of the median speed-up against the 2 % threshold: adopted, kept out or inconclusive) and the noise
  rule for waterfall categories a rung does not touch
- `waterfall`: where the baseline's time went (compute, data wait, host sync, launch overhead,
  optimizer) from a profiled step, and how each rung moved it
- `rungmath`: the arithmetic behind two rungs' explanations (padding the vocabulary: tile counts and
  row alignment; full checkpointing: the recomputed share of a step's FLOPs)
- `published`: published figures (nanoGPT, llm.c) with their sources (`data/published_tune.json`)
- `plots`: lesson 11's figures (the waterfall)
- `panel`: lesson 11's panel (the learner's own ladder, applied in the ladder's order)
- `sizes`: lesson 11's sizes by kind of run (the preset it climbs, the rungs it leaves to `perflab tune`,
  its audit's size), read once by the lesson
- `levers`: which part of a step's time (the waterfall's parts) each rung acts on, and so the most it can save
- `lab11`: the lab's checks (a rung plan that must beat the baseline with parity kept; an audit's largest lever)

Uses other topics' formulas, never their figures, widgets or lab checks: perflab.flops (exact
FLOPs of a step, the measured matmul ceiling), perflab.memory (lesson 03's step-memory estimator
and allocation probe), perflab.compiler (the dtype tolerance of loss parity), perflab.dataloading
(a DataLoader built as lesson 07 builds it), perflab.numa (the topology lesson 08 reads) and
perflab.profiling (lesson 09's trace diagnosis).
"""

from perflab._lazy import lazy_modules

MODULES = ("ladder", "config", "changes", "measure", "rows", "runner", "rungmath", "verdict", "waterfall", "published",
           "plots", "levers", "lab11", "panel", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
