"""Tests of `perflab.compiler.models`."""

import torch

from perflab.compiler import models


def test_complex_and_real_rope_agree():
    x = torch.randn(2, 4, 8, 16)
    ang = models.rope_angles(8, 16)
    torch.testing.assert_close(models.rope_real(x, ang), models.rope_complex(x, ang), rtol=1e-5, atol=1e-6)
