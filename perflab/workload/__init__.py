"""The workload several lessons share: model configs, small transformers built from them, their
optimizer, a slow dataset of token ids, and the one timed training step (lessons 02, 03, 07, 09, 10
and 11 all train the same models with it). Uses `perflab.core`.

- `models`: decoder-only transformer configs (presets), exact parameter counts, PyTorch models
- `optim`: `make_optimizer`, the one place a lesson's optimizer is built (AdamW's loop, foreach and
  fused forms, SGD), and whether fused AdamW runs on a device
- `data`: `SlowTokens`, token ids that are slow to read (a DataLoader's starving loop)
- `train`: batches, the next-token loss, and the training step (`StepRunner`) timed phase by phase
"""

from perflab._lazy import lazy_modules

MODULES = ("models", "optim", "data", "train")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
