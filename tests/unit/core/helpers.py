"""Helpers the tests of this folder share."""

import torch

from perflab.core.device import DeviceInfo
from perflab.course import report as R

CPU = torch.device("cpu")


def _ctx(quick: bool, info=None) -> R.Ctx:
    return R.Ctx(CPU, info if info is not None else DeviceInfo("cpu", "test cpu"), quick)


class _Printer:
    """IPython's pretty printer, as far as `_repr_pretty_` uses it."""

    def __init__(self):
        self.out = ""

    def text(self, s: str) -> None:
        self.out += s
