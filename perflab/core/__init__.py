"""The measuring core: measure anything on any device. Every lesson stands on it; it imports
nothing else from perflab.

- `errors`: exceptions that carry a one-line message meant for a person
- `extras`: import a package of an extra, or say in one line which extra to install
- `validate`: checks on sizes typed at the CLI or dragged on a slider
- `dtypes`: data types by the names people use (parsed once, passed on as `DType`)
- `device`: pick the device, wait for it, describe it
- `hardware`: spec-sheet facts per accelerator (`data/accelerators.json`, sourced), the one peak
  look-up (`spec_peak`), and a CPU's peak
- `lock`: one measurement per device at a time, across processes and users (a file lock); a wait is one
  line that rewrites itself
- `quietness`: how much else used the device while something was measured (quiet / disturbed)
- `timing`: do_bench-style timing (time budgets, device events, L2 flush, median and spread)
- `results`: sweeps that survive (per-point append, resume, OOM/invalid rows)
- `sweepnoise`: a sweep's noise and outlier rule, and when its winner beats the baseline
- `measure`: matmul TFLOP/s, copy GB/s, host→device GB/s
- `ceiling`: one store of a device's measured matmul ceilings and one rule for what it keeps
- `roofline`: the roofline model and arithmetic intensity
- `compare`: sentences that compare two measured numbers, computed from them (lesson 00)
- `denormals`: count denormal floats, and measure what they cost a CPU matmul and an untrained model's
  step (lesson 00), each figure with its quietness
- `machine`: lesson 00's readings of this machine as typed results (spec sheets, the matmul per dtype,
  copies by size, host→device, the machine in one table)
- `lesson00`: lesson 00's sizes by where it runs (smoke, a CPU, a GPU)
- `readout`: numbers and results formatted for a person (rounded, with units and the spread)
- `stats`: one quantile rule, the IQR, the standard error of a median, two medians compared
- `verdicts`: the words a measurement lets perflab say (quiet, disturbed; agree, differ; inconclusive)
- `jsonable`: JSON made once, at the edge, from perflab's types
- `sizes`: a lesson's sizes by where it runs (smoke, a CPU, a GPU), read from its topic's table
- `stderr`: keep torch's known C++ noise (the profiler's start/stop lines, the allocator's notes) off
  stderr, every other line kept
"""

from perflab._lazy import lazy_modules

MODULES = ("errors", "extras", "validate", "dtypes", "device", "hardware", "lock", "quietness", "timing", "results",
           "sweepnoise", "measure", "compare", "roofline", "denormals", "readout", "stats", "verdicts",
           "jsonable", "sizes", "stderr", "ceiling", "machine", "lesson00")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
