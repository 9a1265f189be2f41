"""Helpers the tests of this folder share."""

import torch


def _ids(n=16):
    return torch.randint(0, 256, (2, n), generator=torch.Generator().manual_seed(1))
