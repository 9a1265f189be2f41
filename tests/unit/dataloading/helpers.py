"""Helpers the tests of this folder share."""

import torch

CPU = torch.device("cpu")
