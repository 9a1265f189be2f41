"""Helpers the tests of this folder share."""

import torch

from perflab.tune.ladder import preset as tune_preset

CPU = torch.device("cpu")


SMOKE = tune_preset("smoke")
