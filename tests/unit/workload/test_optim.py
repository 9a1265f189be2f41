"""Tests of `perflab.workload.optim`: the one `make_optimizer`."""

from __future__ import annotations

import pytest
import torch

from perflab.core.errors import InputError, UnsupportedError
from perflab.workload import optim


def _params():
    return [torch.nn.Parameter(torch.zeros(2))]


def test_each_kind_is_the_optimizer_it_names():
    loop = optim.make_optimizer(_params(), "adamw-loop")
    each = optim.make_optimizer(_params(), "adamw-foreach")
    plain = optim.make_optimizer(_params())
    sgd = optim.make_optimizer(_params(), "sgd")
    assert isinstance(plain, torch.optim.AdamW) and plain.defaults["foreach"] is None  # torch chooses
    assert loop.defaults["foreach"] is False and each.defaults["foreach"] is True
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == optim.SGD_MOMENTUM
    # the learning rates the lessons used before there was one make_optimizer
    assert plain.defaults["lr"] == 1e-4 and sgd.defaults["lr"] == 1e-3
    assert optim.make_optimizer(_params(), "ADAMW-Fused", lr=1e-3).defaults["lr"] == 1e-3  # names as typed


def test_an_unknown_kind_is_one_line_listing_the_kinds():
    with pytest.raises(InputError, match=r"^unknown optimizer 'lion': use one of adamw, adamw-loop, adamw-foreach, "
                                         r"adamw-fused, sgd$"):
        optim.make_optimizer(_params(), "lion")


def test_fused_adamw_missing_from_torch_is_one_line(monkeypatch):
    real = torch.optim.AdamW

    def old_adamw(params, lr, **kw):
        if "fused" in kw:
            raise TypeError("__init__() got an unexpected keyword argument 'fused'")
        return real(params, lr=lr, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", old_adamw)
    with pytest.raises(UnsupportedError, match=r"^fused AdamW is not available here \(.*'fused'\): use adamw$"):
        optim.make_optimizer(_params(), "adamw-fused")


def test_fused_adamw_is_available_only_where_it_steps():
    assert optim.fused_adamw_available(torch.device("meta")) is False  # the meta device computes nothing
    assert optim.fused_adamw_available(torch.device("cpu")) in (True, False)
