"""The optimizer of every lesson's training step, built in one place.

    >>> opt = make_optimizer(model.parameters())                          # AdamW, lr 1e-4
    >>> opt = make_optimizer(model.parameters(), "adamw-fused", lr=1e-3)  # the ladder's fused rung

Kinds (`OPTIMIZERS`):

* `adamw`: `torch.optim.AdamW` as torch chooses to run it (a multi-tensor `foreach` update where it can);
* `adamw-loop`: a Python loop over the parameters (`foreach=False`), a few small ops per tensor:
  lesson 11's baseline;
* `adamw-foreach`: one multi-tensor op per update step (`foreach=True`);
* `adamw-fused`: one fused kernel (`fused=True`: CUDA, and the CPU since torch 2.4); where torch
  has none, an UnsupportedError says so in one line;
* `sgd`: SGD with momentum 0.9, one state per parameter (lesson 03's lighter optimizer).

The learning rate is `lr`, by default `DEFAULT_LR` of the kind's family (AdamW 1e-4, SGD 1e-3): the
lessons compare speed, memory and parity, which no learning rate changes, and a small one keeps a few
steps of a random model well away from divergence. Weight decay and betas are torch's defaults.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from perflab.core.errors import InputError, UnsupportedError

OPTIMIZERS = ("adamw", "adamw-loop", "adamw-foreach", "adamw-fused", "sgd")
DEFAULT_LR = {"adamw": 1e-4, "sgd": 1e-3}
SGD_MOMENTUM = 0.9
_ADAMW_KW: dict[str, dict[str, Any]] = {"adamw": {}, "adamw-loop": {"foreach": False},
                                        "adamw-foreach": {"foreach": True}, "adamw-fused": {"fused": True}}


def make_optimizer(params: Iterable[Any], kind: str = "adamw", *, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer of `kind` (module docstring) over `params`, at learning rate `lr` (default
    `DEFAULT_LR`)."""
    key = str(kind).strip().lower()
    if key not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {kind!r}: use one of {', '.join(OPTIMIZERS)}")
    if key == "sgd":
        return torch.optim.SGD(params, lr=DEFAULT_LR["sgd"] if lr is None else lr, momentum=SGD_MOMENTUM)
    rate = DEFAULT_LR["adamw"] if lr is None else lr
    try:
        return torch.optim.AdamW(params, lr=rate, **_ADAMW_KW[key])
    except (RuntimeError, TypeError) as e:
        if key != "adamw-fused":
            raise
        raise UnsupportedError(f"fused AdamW is not available here ({e}): use adamw") from e


def fused_adamw_available(device: torch.device) -> bool:
    """Whether torch's fused AdamW steps on `device` (CUDA; the CPU since torch 2.4): one real step
    of a two-element parameter, since some builds only refuse when the kernel is first needed."""
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        opt = torch.optim.AdamW([p], fused=True)
        p.grad = torch.zeros_like(p)
        opt.step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False
