"""Lesson 08 (NUMA): which cores belong to which accelerator, binding each rank to them, and the
effect measured where the machine has more than one node.

- `topology`: sysfs readers (nodes, CPUs, memory, distances, SMT siblings, GPUs' nodes), all rooted
- `smi_topo`: `nvidia-smi topo -m` parsed (links, CPU and NUMA affinity, NICs, legend)
- `plan`: the per-rank core split, numactl lines, `bind_rank` (os.sched_setaffinity), and a job whose ranks bind
  themselves (`launch_bound`, through perflab.distributed's launcher)
- `bound`: run a program bound to its rank's cores (what the torchrun launcher's `bind=True` starts)
- `effect`: local vs remote memory bandwidth and latency, host→device copies per node (multi-node)
- `plots`: the topology and a plan drawn
- `lab08`: the lab's checks
- `panel`: lesson 08's panel (a topology and a rank count → plan and rank map); the published server; node vs total memory
- `sizes`: lesson 08's sizes by where it runs (smoke, a CPU, a GPU)
"""

from perflab._lazy import lazy_modules

MODULES = ("topology", "smi_topo", "plan", "bound", "effect", "plots", "lab08", "panel", "sizes")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
