"""Tests of `perflab.course.notebook`."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")


def test_lesson_context_picks_the_full_size_on_a_gpu():
    import torch

    from perflab.course.notebook import Context

    gpu = Context(torch.device("cuda"), None, None, smoke=False)
    cpu = Context(torch.device("cpu"), None, None, smoke=False)
    assert gpu.pick(full=4096, smoke=64, cpu=512) == 4096 and cpu.pick(full=4096, smoke=64, cpu=512) == 512
    assert cpu.pick(full=4096, smoke=64) == 4096  # no CPU size given: the full one


def test_tables_show_meaningful_digits_without_padded_zeros():
    from perflab.course.notebook import trimmed

    assert [trimmed(x) for x in (0.8, 1.2, 27.0, 0.0012, 1234.5, 22.7, 3.14159, 0.0)] == \
        ["0.8", "1.2", "27", "0.0012", "1,234", "22.7", "3.142", "0"]


def test_readable_tables_say_what_is_missing_and_why():
    import pandas as pd

    from perflab.course.notebook import readable

    df = pd.DataFrame({"name": ["a", "b"], "fp8": [1979.0, None], "SMs": [132, 108]})
    out = readable(df, {"fp8": "no fp8 on the datasheet"})
    assert list(out["fp8"]) == ["1,979", "no fp8 on the datasheet"] and list(out["SMs"]) == ["132", "108"]
