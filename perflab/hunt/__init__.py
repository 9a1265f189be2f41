"""Lesson 14 (the regression hunt): a training step slowed by hidden causes drawn for each learner,
found from evidence alone, graded on what was found and what each fix recovered.

- `pool`: the planted regressions as data (each one switch on one step, its category, its fix and
  the instrument that shows it), the report's categories and fixes, and the candidates this machine
  cannot host (GPU-only, distributed, compile-time), each with its reason
- `step`: the step itself (perflab's workload model, a DataLoader, AdamW, clipping, logging), built
  with any set of regressions switched on; its instruments (phase timer, profiler op table and
  lesson 09's diagnosis, DataLoader wait, gc and thread counters); parity of the loss; the costs
  of the regressions, measured with interleaved repeats
- `draw`: a learner's k regressions, drawn from a random seed made of their user name and the course's salt,
  kept encoded; the teacher's view of every learner's draw
- `report`: the learner's claims (category, evidence, fix), graded: precision, recall, each fix's
  recovery measured in a process of its own, loss parity, fixes that change the model
- `plots`: the waterfall (where the step's time goes, per configuration)
- `panel`: lesson 14's panel (the step re-run with the fixes ticked) and its one-fix-at-a-time measurement
- `sizes`: the step's sizes by kind of run (smoke, and the rest), read once by the lesson and by name
  in a grader's process
- `lab14`: the lab's checks

Uses other topics' formulas and data, never their widgets: perflab.tune (the capstone's GPT-shaped
CPU model and its written-out attention), perflab.profiling (lesson 09's trace diagnosis) and
perflab.compiler (the dtype's parity tolerance).
"""

from perflab._lazy import lazy_modules

MODULES = ("pool", "sizes", "step", "draw", "report", "plots", "panel", "lab14")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
