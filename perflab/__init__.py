"""perflab: measure what your hardware really does for neural-network training.

Importing perflab has no side effects: it sets no seeds, threads or global flags, and imports
torch only where a function needs it. Start with:

    >>> import perflab
    >>> dev = perflab.core.device.pick_device()
    >>> print(perflab.core.device.describe(dev))

The package is laid out as the course is (README, "How the code is laid out"); imports only go
down this list:

- `cli`, `commands`: the `perflab` command line
- `classroom`: the teacher's grading of a class's labs, and the learners' copy of the course
- `course`: what only notebooks need (lesson start, widgets, shared plots, reference data)
- one package per lesson topic: `flops` (01–02), `memory` (03), `gemm` (04, 04b, 05), `distributed` (06),
  `dataloading` (07), `numa` (08), `profiling` (09), `compiler` (10), `tune` and `audit` (11), `shard` (12),
  `attention` (13), `hunt` (14), `plan` (15)
  and `numerics` (16)
- `workload`: the models and the timed training step several lessons share; `grading`: the labs' tutor
- `core`: measuring anything on any device (device, hardware, dtypes, timing, results, errors)
"""

from perflab._lazy import lazy_modules

__version__ = "0.1.0"

PACKAGES = ("core", "grading", "workload", "flops", "memory", "gemm", "attention", "distributed", "dataloading",
            "numerics",
            "numa", "profiling", "compiler", "shard", "tune", "audit", "hunt", "plan", "course", "classroom", "commands",
            "cli")
__getattr__, __dir__ = lazy_modules(__name__, PACKAGES)
