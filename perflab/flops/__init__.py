"""Lessons 01 (FLOPs, MACs, FLOP/s) and 02 (MFU vs HFU): counting work and dividing by a peak.

- `counting`: FLOPs of layers by hand, and torch's counter to check them
- `rates`: lesson 01's measurements: a count turned into a rate, kernels placed on this device's roofline
- `counter`: a FLOP counter that does not miss attention, per module and phase
- `aten`: the FLOPs of one aten call (the counter's formulas; `op_flops` for a cost per operator)
- `transformer`: a decoder's FLOPs under every published convention, and an exact count
- `mfu`: MFU/HFU: `utilization`, the one division of FLOPs by a peak or ceiling; published runs
  recomputed (`data/published_runs.json`)
- `basis`: what an MFU divides by: the spec peak, or the ceiling measured here (`perflab.core.ceiling`)
- `step`: a training step's MFU/HFU measured, gradient accumulation, the GC straggler
- `plots`: lesson 02's figures and panels
- `lab01`, `lab02`: the labs' checks
- `sizes`: the lessons' sizes by kind of run (smoke, a CPU, a GPU): lesson 01's `RATES`, lesson 02's `MFU`

`basis.matmul_ceiling` reads the measured matmul ceiling of `perflab.gemm.mamf` (lesson 04's search).
"""

from perflab._lazy import lazy_modules

MODULES = ("counting", "rates", "counter", "aten", "transformer", "mfu", "basis", "step", "plots", "lab01", "lab02", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
