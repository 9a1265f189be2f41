"""The workload several lessons share: model configs, small transformers built from them, and a
timed training step (lessons 02, 03, 07, 09 and 10 all train the same models). Uses `perflab.core`.

- `models`: decoder-only transformer configs (presets), exact parameter counts, PyTorch models
- `train`: batches, the next-token loss, and a training step timed phase by phase
"""

from perflab._lazy import lazy_modules

MODULES = ("models", "train")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
