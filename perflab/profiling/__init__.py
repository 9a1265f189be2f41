"""Lesson 09 (profiling): find why a step is slow from its trace, and name the cause.

- `trace`: read an exported Chrome trace (any `torch.profiler` trace); what "the device" is on CPU and GPU
- `diagnose`: device busy share, idle gaps and their causes (data wait, host sync, launch-bound, communication)
- `faults`: a real training step with planted faults (one switch each), profiled with a schedule
- `planted`: lesson 09's planted faults side by side: profiled at the lesson's sizes, their diagnoses, the fixes
- `comm_worker`: the communication fault's rank, started by perflab.distributed's torchrun launcher
- `ops`: the top-operators table, the timeline's lanes, GEMM efficiency and the Tensor Core share
- `pitfalls`: the timing pitfalls (wall clock with and without sync, CUDA events, perflab's timer)
- `kernel`: a small fused op built with `torch.utils.cpp_extension.load_inline`, timed and traced
- `ettr`: the effective training time ratio and the Young/Daly checkpoint interval (`data/published_ettr.json`)
- `nsight`: `nsys` / `ncu` command lines for a step
- `hta`: a cross-check with HolisticTraceAnalysis on GPU traces, where it is installed
- `plots`: lesson 09's figures
- `lab09`: the lab's checks
- `quiet`: keep the profiler's own USDT/STAGE lines off stderr
- `sizes`: lesson 09's sizes by where it runs (smoke, a CPU, a GPU: a step large enough for the device)

Uses `perflab.gemm` (lesson 04's measured matmul ceiling, for GEMM efficiency) and `perflab.distributed`
(the torchrun launcher, for the two-rank communication fault).
"""

from perflab._lazy import lazy_modules

MODULES = ("trace", "diagnose", "faults", "planted", "comm_worker", "ops", "pitfalls", "kernel", "ettr", "nsight", "hta",
           "plots", "lab09", "quiet", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
