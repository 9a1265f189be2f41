"""The `perflab numa` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

from clirun import perflab

from .helpers import _one_line_error


def test_numa_refuses_a_folder_that_is_not_sys(tmp_path):
    _one_line_error(perflab("numa", "--sysfs", str(tmp_path)), "no devices/system folder there")


def test_numa_plan_without_gpus_asks_for_nproc(tmp_path):
    (tmp_path / "devices" / "system" / "node").mkdir(parents=True)  # a /sys with no node and no PCI GPU
    _one_line_error(perflab("numa", "--plan", "--sysfs", str(tmp_path)), "no GPU found to plan for: give --nproc N")
