"""The `perflab` command line."""

import argparse
import json

import pytest
from clirun import perflab as perflab_cli

from perflab import cli
from perflab.cli import main


def _cli_with(monkeypatch, action):
    """`perflab boom` whose command runs `action()`."""

    def build():
        parser = argparse.ArgumentParser(prog="perflab")
        sub = parser.add_subparsers(dest="command")
        sub.add_parser("boom").set_defaults(func=lambda args: action())
        return parser

    monkeypatch.setattr(cli, "build_parser", build)


@pytest.mark.parametrize("args,needle", [
    (["flops", "--layers", "2", "--hidden", "64"], "missing --heads"),
    (["flops", "--preset", "gpt-9"], "unknown preset"),
    (["flops", "--preset", "tiny-gpt", "--hidden", "130"], "divisible"),
    (["flops", "--layers", "0", "--hidden", "64", "--heads", "4", "--vocab", "10"], "≥ 1"),
    (["mfu", "--tokens-per-s", "0", "--flops-per-token", "5", "--peak", "1"], "positive"),
    (["mfu", "--tokens-per-s", "10", "--flops-per-token", "5", "--accelerator", "tpu9"], "unknown accelerator"),
    (["mfu", "--tokens-per-s", "10", "--params", "1e9", "--peak", "1"], "needs --layers"),
    (["mfu", "--flops-per-token", "5", "--peak", "1"], "--tokens-per-s"),
    (["mfu", "--tokens-per-s", "10", "--peak", "1"], "--flops-per-token"),
    (["mfu", "--measure"], "--preset"),
    (["mfu", "--tokens-per-s", "10", "--preset", "tiny-gpt", "--convention", "nope", "--peak", "1"], "unknown convention"),
])
def test_bad_arguments_one_line(args, needle):
    r = perflab_cli(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err


def test_mamf_json_on_cpu(tmp_path):
    env = {"PERFLAB_RESULTS": str(tmp_path)}
    args = ["mamf", "--m-range", "0", "96", "32", "--n-range", "32", "96", "32", "--k-range", "32", "64", "32",
            "--dtype", "fp32", "--device", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--json"]
    r = perflab_cli(*args, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    b = d["best"]
    assert {"m", "n", "k", "tflops", "mean", "median", "max"} <= set(b)
    assert b["m"] in (32, 64, 96) and b["k"] in (32, 64) and b["max"] >= b["median"] > 0
    assert d["grid_points"] == 18 and d["evaluated"] <= 18 and d["ranges"]["m"] == [32, 96, 3]
    entry = json.loads(open(d["ceiling_file"]).read())["slots"]["fp32 search"]  # perflab.core.ceiling's store
    assert entry["last"]["tflops"] == b["tflops"]
    if entry["stored"]:  # stored as this device's fp32 ceiling
        assert entry["stored"][-1]["tflops"] == b["tflops"] and entry["last"]["questioned"] is None
    else:  # not stored, and the record says why (perflab.core.ceiling.admit's four rules)
        why = entry["last"]["questioned"]
        assert any(w in why for w in ("cannot exceed the peak", "did not repeat", "the machine was busy",
                                      "quietness could not be read", "quieter machine")), why
    # resumable: the same command measures nothing new
    again = json.loads(perflab_cli(*args, env=env).stdout)
    assert again["measured"] == 0 and again["best"] == b


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


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"a": 1}')
    for argv in (["profile", "--trace", str(tmp_path / "missing.json")], ["profile", "--trace", str(tmp_path / "bad.json")],
                 ["profile", "--fault", "gremlins"], ["profile", "--steps", "0"],
                 ["profile", "--trace-out", str(tmp_path / "no" / "dir" / "t.json")],
                 ["ettr", "--hours", "-1", "--gpus", "8", "--mtbf-hours", "1e4", "--ckpt-minutes", "1", "--restart-minutes", "1"],
                 ["ettr", "--hours", "10", "--gpus", "8", "--mtbf-hours", "1e4", "--ckpt-minutes", "x", "--restart-minutes", "1"]):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2, argv
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
