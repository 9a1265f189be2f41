"""perflab's entry point: what `perflab` does with no command, an interrupt, a closed pipe, an out-of-
memory error and any other bug; and lazy packages list their submodules."""

import argparse

import pytest

import perflab.profiling
from perflab import cli


def _cli_with(monkeypatch, action):
    """`perflab boom` whose command runs `action()`."""

    def build():
        parser = argparse.ArgumentParser(prog="perflab")
        sub = parser.add_subparsers(dest="command")
        sub.add_parser("boom").set_defaults(func=lambda args: action())
        return parser

    monkeypatch.setattr(cli, "build_parser", build)


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: perflab" in capsys.readouterr().out


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def stop():
        raise KeyboardInterrupt

    _cli_with(monkeypatch, stop)
    assert cli.main(["boom"]) == 130
    assert capsys.readouterr().err == "perflab boom: interrupted\n"


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    def closed():
        raise BrokenPipeError

    _cli_with(monkeypatch, closed)
    assert cli.main(["boom"]) == 0  # `perflab ... | head`: nothing left to say
    assert capsys.readouterr().err == ""


def test_out_of_memory_is_the_users_to_fix(monkeypatch, capsys):
    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    _cli_with(monkeypatch, oom)
    assert cli.main(["boom"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("perflab boom: error: out of memory (") and err.endswith("choose smaller sizes\n")
    assert err.count("\n") == 1


def test_other_bugs_keep_their_traceback(monkeypatch):
    def bug():
        raise ZeroDivisionError("a bug in perflab")

    _cli_with(monkeypatch, bug)
    with pytest.raises(ZeroDivisionError):
        cli.main(["boom"])


def test_lazy_packages_list_their_submodules():
    names = dir(perflab.profiling)
    assert names == sorted(names) and "trace" in names and "diagnose" in names
