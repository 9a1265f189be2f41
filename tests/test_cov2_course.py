"""The course plumbing's remaining refusals and fallbacks, each driven in-process with bad input,
tmp_path files or a small fake: where the grader finds the labs, notebooks that read but do not
validate, a runner that leaves no executed notebook or one cut short, the gradebook's long list of
unmatched files, prediction summaries with choices, reference files and their labels, the release
builder's skipped files, report parts whose measurements fail or stop, and the widgets' refusals."""

from __future__ import annotations

import json
import math
import runpy
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from perflab.core.errors import InputError
from perflab.course import gradebook as G


def _notebook(path: Path, code: str = "x = 1", outputs: list | None = None) -> Path:
    cell = nbformat.v4.new_code_cell(code)
    if outputs:
        cell.outputs = outputs
    nb = nbformat.v4.new_notebook(cells=[cell])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb))
    return path


# ----------------------------------------------------------------------------- the grader
def test_without_labs_here_or_beside_the_package_there_is_no_default_course(tmp_path, monkeypatch):
    import perflab

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(perflab, "__file__", str(tmp_path / "site" / "perflab" / "__init__.py"))
    assert G.default_labs_dir() is None
    with pytest.raises(InputError, match=r"^no course labs at labs/: pass --course PATH/TO/labs"):
        G.course_labs()
    _notebook(tmp_path / "labs" / "01_flops.ipynb")
    assert G.default_labs_dir().resolve() == (tmp_path / "labs").resolve()


def test_blank_lab_names_are_ignored_and_hidden_folders_are_not_learners(tmp_path):
    labs = {"01": G.Lab("01", "01_flops", tmp_path / "01_flops.ipynb", ()),
            "02": G.Lab("02", "02_mfu", tmp_path / "02_mfu.ipynb", ())}
    assert list(G.pick_labs(labs, ["", " 02 ", "  "])) == ["02"]
    root = tmp_path / "hand-in"
    _notebook(root / ".git" / "01_flops.ipynb")  # a hidden folder beside the learners' ones
    mine = _notebook(root / "alice" / "01_flops.ipynb")
    subs, notes = G.find_submissions(root, labs)
    assert [(s.learner, s.path) for s in subs] == [("alice", mine)] and notes == []


def test_a_notebook_that_reads_but_does_not_validate_is_malformed_in_one_line(tmp_path):
    doc = json.loads(_notebook(tmp_path / "a.ipynb").read_text())
    doc["cells"][0]["execution_count"] = "one"
    (tmp_path / "a.ipynb").write_text(json.dumps(doc))
    assert G.load_notebook(tmp_path / "a.ipynb") == (None, "malformed notebook ('one' is not of type 'integer', 'null')")


def test_predictions_file_lines_that_are_not_json_objects_are_skipped(tmp_path):
    (tmp_path / "predictions.jsonl").write_text('{"lesson": "01", "key": "k", "predicted": 2.0, "extra": 1}\n'
                                                "not json\n[1, 2]\n")
    (row,) = G.read_predictions(tmp_path)
    assert row["lesson"] == "01" and row["predicted"] == 2.0 and "extra" not in row
    assert list(row) == list(G.PREDICTION_FIELDS)


def _fake_runner(monkeypatch, executed: str | None, log: str, predictions: str = ""):
    """grade_one's runner process, replaced: it writes `log` and (unless None) `executed` as the
    executed notebook, and `predictions` into the submission's results folder."""
    def popen(cmd, *, cwd, env, stdin, stdout, stderr, start_new_session):
        stdout.write(log.encode())
        if executed is not None:
            Path(cmd[4]).write_text(executed)
        if predictions:
            (Path(env["PERFLAB_RESULTS"]) / "predictions.jsonl").write_text(predictions)
        return SimpleNamespace(wait=lambda timeout=None: 0)

    fake = SimpleNamespace(Popen=popen, TimeoutExpired=subprocess.TimeoutExpired, DEVNULL=subprocess.DEVNULL,
                           STDOUT=subprocess.STDOUT)
    monkeypatch.setattr(G, "subprocess", fake)
    monkeypatch.setattr(G, "_kill_tree", lambda proc: None)


def _submission(tmp_path) -> G.Submission:
    path = _notebook(tmp_path / "alice" / "01_flops.ipynb", "lab.check_flops(1)")
    return G.Submission("alice", G.Lab("01", "01_flops", path, ("check_flops",)), path)


def test_a_runner_that_leaves_a_half_written_notebook_is_an_error_with_its_log(tmp_path, monkeypatch):
    _fake_runner(monkeypatch, executed="{half a notebo", log="starting\nOSError: no kernel named python3\n",
                 predictions='{"lesson": "01", "key": "k", "predicted": 1.0}\n{broken\n')
    rec = G.grade_one(_submission(tmp_path), timeout=5, limits=G.Limits())
    assert rec.outcome == "error"
    assert rec.message == "the kernel could not run the notebook: OSError: no kernel named python3"
    assert [p["key"] for p in rec.predictions] == ["k"]


def test_a_notebook_cut_short_names_the_runners_last_error_and_the_likely_limit(tmp_path, monkeypatch):
    executed = _notebook(tmp_path / "executed.ipynb", "lab.check_flops(1)",
                         [nbformat.v4.new_output("stream", text="measuring\n")]).read_text()
    _fake_runner(monkeypatch, executed=executed, log="running cell 1\nMemoryError\nshutting down\n")
    rec = G.grade_one(_submission(tmp_path), timeout=5, limits=G.Limits())
    assert (rec.outcome, rec.message) == ("error", "MemoryError (memory or CPU-time limit?)")


def test_a_timeout_without_a_running_cell_names_none():
    assert G._running_cell(None) == ""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["papermill"] = {"status": "completed"}
    assert G._running_cell(nb) == ""
    nb.cells[0].metadata["papermill"] = {"status": "running"}
    assert G._running_cell(nb) == " (cell 0: x = 1)"


def test_killing_the_runner_survives_a_child_that_is_already_gone(monkeypatch):
    import psutil

    runner = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["true"])
    ghost = psutil.Process(gone.pid)
    gone.wait()
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [ghost])
    G._kill_tree(runner)
    assert runner.returncode == -signal.SIGKILL and not ghost.is_running()


def test_the_summary_lists_eight_unmatched_files_and_counts_the_rest():
    book = G.Gradebook([], [], [f"bob/x{i}.ipynb: no lab number" for i in range(11)], 1.0, 1, 5.0)
    lines = book.summary().splitlines()
    assert lines[-2] == "  bob/x7.ipynb: no lab number"
    assert lines[-1] == "  … and 3 more (see --json)"


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_grading_refuses_a_timeout_that_is_not_positive(tmp_path, timeout):
    with pytest.raises(InputError, match=rf"^timeout must be > 0 seconds \(got {timeout}\)$"):
        G.grade_folder(tmp_path, timeout=timeout)


# ----------------------------------------------------------------------------- nbclean
def test_execution_metadata_or_a_foreign_kernel_make_a_notebook_dirty():
    from perflab.course import nbclean

    assert not nbclean.is_clean({"cells": [{"cell_type": "markdown", "metadata": {"execution": {}}}]})
    assert not nbclean.is_clean({"cells": [], "metadata": {"kernelspec": {"name": "conda-env-torch"}}})
    assert nbclean.is_clean({"cells": [], "metadata": {"kernelspec": dict(nbclean.KERNELSPEC)}})


def test_nbclean_run_as_a_module_exits_with_the_check_status(tmp_path, monkeypatch, capsys):
    dirty = _notebook(tmp_path / "a.ipynb", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    monkeypatch.delitem(sys.modules, "perflab.course.nbclean", raising=False)
    monkeypatch.setattr(sys, "argv", ["nbclean", "--check", str(dirty)])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("perflab.course.nbclean", run_name="__main__")
    assert e.value.code == 1 and capsys.readouterr().out == f"dirty: {dirty}\n"


# ----------------------------------------------------------------------------- predictions
@pytest.fixture
def predict(tmp_path, monkeypatch):
    from perflab.course import predict as P

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    yield P
    P.reset()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1e999"])
def test_a_number_that_is_not_finite_is_refused(predict, value):
    with pytest.raises(ValueError, match=r"is not a finite number$"):
        predict.parse_number(value)


def test_an_empty_list_of_choices_is_refused(predict):
    with pytest.raises(ValueError, match=r"^choices, when given, must list at least one answer$"):
        predict.ask("04", "k", "which?", choices=[])


def test_choices_show_a_verdict_and_the_calibration_counts_them(predict, tmp_path):
    right = predict.reveal(predict.ask("04", "a", "which is faster?", choices=["x", "y"], given={"a": "x"}), "x",
                           device="d")
    wrong = predict.reveal(predict.ask("04", "b", "which is slower?", choices=["x", "y"], given={"b": "x"}), "y",
                           device="d")
    predict.reveal(predict.ask("04", "c", "step time", "ms", given={"c": 12}), 10.0, device="d")
    assert dict(right.rows)["verdict"] == "right" and dict(wrong.rows)["verdict"] == "not this time"
    assert str(wrong).splitlines()[-1].split() == ["verdict", "not", "this", "time"]
    cal = predict.calibration("04")
    assert cal.verdict == ("lesson 04: 3 of 3 predicted; numbers: median miss 20 %, 1 over, 0 under "
                           "(you tend to over-estimate); choices: 1 of 2 right")
    assert str(cal).splitlines() == [cal.verdict, "  which is faster?: x vs x (right)",
                                     "  which is slower?: x vs y (wrong)", "  step time: 12 ms vs 10 ms (+20 %)"]
    page = cal._repr_html_()
    assert page.startswith("<div class='perflab-calibration'><b>lesson 04: 3 of 3 predicted;")
    assert "<td>which is slower?</td>" in page and "<td>+20 %</td>" in page
    assert predict.calibration("none")._repr_html_() == (
        "<div class='perflab-calibration'><b>lesson none: nothing was predicted yet</b></div>")
    saved = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [(x["key"], x["correct"]) for x in saved] == [("a", True), ("b", False), ("c", None)]


# ----------------------------------------------------------------------------- reference data
def test_reference_folder_from_the_environment_or_none_at_all(tmp_path, monkeypatch):
    from perflab.course import reference as ref

    monkeypatch.setenv("PERFLAB_DATA", "~/course-data")
    assert ref.data_root() == Path.home() / "course-data"
    monkeypatch.delenv("PERFLAB_DATA")
    monkeypatch.setattr("perflab.core.results.course_checkout", lambda: None)
    assert ref.data_root() is None
    with pytest.raises(InputError, match=r"^no data/ folder here \(perflab is not run from the course checkout\)"):
        ref.reference_path("waves", "cpu")


def test_a_reference_written_from_a_dataframe_reads_back_its_rows(tmp_path):
    import pandas as pd

    from perflab.course import reference as ref

    path = ref.record_reference("waves", pd.DataFrame([{"n": 64, "tflops": 0.5}, {"n": 128, "tflops": 0.75}]),
                                device="cpu", params={"dim": "n"}, root=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("waves__cpu-")
    (back,) = ref.load_references("waves", tmp_path, gpu_only=False)
    assert back.rows == [{"n": 64, "tflops": 0.5}, {"n": 128, "tflops": 0.75}] and back.params == {"dim": "n"}


def test_a_reference_label_names_the_driver_and_cuda():
    from perflab.course.reference import Reference

    r = Reference("waves", {"device": "NVIDIA H100 80GB HBM3", "driver_version": "550.54", "cuda_version": "12.4",
                            "torch_version": "2.4.0", "date": "2025-01-10T10:00:00+00:00"}, {}, [])
    assert r.label == "NVIDIA H100 80GB HBM3 · driver 550.54 · CUDA 12.4 · torch 2.4.0 · 2025-01-10 (reference data)"


def test_an_unknown_reference_kind_is_refused_before_anything_is_measured(tmp_path):
    from perflab.course import reference as ref

    msg = r"^unknown reference kind 'bogus': use one of waves, heads, swiglu, mamf$"
    with pytest.raises(InputError, match=msg):
        ref.recording_sizes("bogus")
    with pytest.raises(InputError, match=msg):
        ref.record("bogus", "cpu", smoke=True, root=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the release
def test_a_release_needs_a_checkout_with_labs_and_notebooks(tmp_path, monkeypatch):
    import perflab
    from perflab.course import release

    monkeypatch.setattr(perflab, "__file__", str(tmp_path / "site" / "perflab" / "__init__.py"))
    root = (tmp_path / "site").resolve()
    with pytest.raises(InputError, match=rf"^{root} has no labs/ and notebooks/: build the release from a checkout"):
        release.course_root()


def test_the_release_leaves_out_egg_info_and_solutions(tmp_path):
    from perflab.course import release

    src = tmp_path / "course"
    (src / "perflab" / "perflab.egg-info").mkdir(parents=True)
    (src / "perflab" / "perflab.egg-info" / "PKG-INFO").write_text("Name: perflab\n")
    (src / "perflab" / "__init__.py").write_text("")
    (src / "notebooks").mkdir()
    _notebook(src / "labs" / "01_flops.ipynb")
    _notebook(src / "labs" / "solutions" / "01_flops.ipynb")
    dest, _zip = release.build_release(tmp_path / "out", src)
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["labs/01_flops.ipynb", "perflab/__init__.py"]


def test_solution_search_skips_files_that_do_not_parse(tmp_path):
    from perflab.course import release

    (tmp_path / "broken.py").write_text("def broken(:\n    return 2 * x\n")
    (tmp_path / "good.py").write_text("def double(x):\n    return 2 * x\n")
    found = release.solution_code_in(tmp_path, {"return 2 * x": "01_flops.ipynb: double"})
    assert found == ["good.py: return 2 * x (from 01_flops.ipynb: double)"]


# ----------------------------------------------------------------------------- the report
def _cpu_ctx(quick: bool):
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    return R.Ctx(torch.device("cpu"), DeviceInfo("cpu", "test cpu"), quick)


def test_full_size_runs_pick_the_gpu_size_only_on_a_gpu():
    import torch

    from perflab.course import report as R

    assert _cpu_ctx(quick=False).pick(quick=1, cpu=2, gpu=3) == 2
    gpu = R.Ctx(torch.device("cuda"), None, quick=False)
    assert gpu.pick(quick=1, cpu=2, gpu=3) == 3 and gpu.pick(quick=1, cpu=2) == 2


def test_a_figure_that_is_not_finite_has_no_value_and_json_gets_null():
    from perflab.course import report as R

    assert R.figure("k", "label", float("nan"), "GB/s")["value"] is None
    assert R.figure("k", "label", float("inf"), "GB/s")["value"] is None
    assert R.clean({"a": [1.0, float("inf")], 2: (math.nan,)}) == {"a": [1.0, None], "2": [None]}


def test_the_device_part_shows_a_spec_sheet_memory_bandwidth():
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    ctx = R.Ctx(torch.device("cpu"), DeviceInfo("cuda", "NVIDIA H100 80GB HBM3"), quick=True)
    out = R.part_device(ctx)
    (bw,) = [f for f in out["figures"] if f["key"] == "spec.memory_bandwidth"]
    assert bw == {"key": "spec.memory_bandwidth", "label": "memory bandwidth (spec sheet)", "value": 3350.0,
                  "unit": "GB/s", "better": "higher"}
    assert out["data"]["spec_id"] == "h100-sxm"


def test_the_collectives_part_fails_when_no_size_was_measured(monkeypatch):
    from perflab.course import report as R
    from perflab.distributed import busbw

    run = SimpleNamespace(backend="gloo", rows=[{"bytes": 65536, "status": "failed", "reason": "timeout"}],
                          report=lambda: "all_reduce gloo × 2: 0 of 1 sizes measured")
    monkeypatch.setattr(busbw, "measure", lambda *a, **kw: run)
    with pytest.raises(RuntimeError, match=r"^all_reduce measured no size: all_reduce gloo × 2: 0 of 1 sizes"):
        R.part_collectives(_cpu_ctx(quick=True))


def test_the_full_numa_part_measures_local_vs_remote_where_there_are_two_nodes(monkeypatch):
    from perflab.course import report as R
    from perflab.numa import effect

    seen = []
    monkeypatch.setattr(effect, "skip_reason", lambda topo: None)
    monkeypatch.setattr(effect, "memory_local_vs_remote",
                        lambda topo, nbytes: seen.append(nbytes) or {"local_gbps": 10.0, "remote_gbps": 6.0})
    out = R.part_numa(_cpu_ctx(quick=False))
    assert seen == [256 * 2**20] and out["notes"] == []
    assert out["data"]["local_vs_remote"] == {"local_gbps": 10.0, "remote_gbps": 6.0}


def test_the_dataloader_part_notes_failed_worker_counts_and_fails_without_any(monkeypatch):
    from perflab.course import report as R
    from perflab.dataloading import compute, loader

    ok = {"status": "ok", "params": {"workers": 0}, "step_s": 0.02, "data_wait_s": 0.004, "wait_fraction": 0.2,
          "predicted_wait_s": 0.004, "first_wait_s": 0.01}
    bad = [{"status": "failed", "params": {"workers": w}, "reason": "worker died"} for w in (1, 2)]
    rows = [ok, *bad]
    monkeypatch.setattr(compute, "calibrate", lambda *a, **kw: "step")
    monkeypatch.setattr(loader, "sweep_workers", lambda workers, **kw: SimpleNamespace(rows=rows))
    out = R.part_dataloader(_cpu_ctx(quick=True))
    assert out["notes"] == ["1 workers: worker died", "2 workers: worker died"]
    assert [r["workers"] for r in out["data"]["rows"]] == [0]
    rows = bad
    with pytest.raises(RuntimeError, match=r"^no worker count could be measured: 1 workers: worker died; 2 workers"):
        R.part_dataloader(_cpu_ctx(quick=True))


def test_the_full_tune_part_runs_the_devices_preset_and_says_where_it_stopped(monkeypatch):
    from perflab.course import report as R
    from perflab.tune import runner

    calls = []

    def ladder(*args, **kw):
        calls.append((args, kw))
        rows = [{"rung": "baseline", "step_s": 1.0, "tokens_per_s": 100.0, "speedup_vs_baseline": 1.0,
                 "adopted": True, "parity_ok": True}]
        return runner.LadderResult("cpu", "cpu", rows, "sdpa: loss off by 0.3 (tolerance 0.01)", "")

    monkeypatch.setattr(runner, "run_ladder", ladder)
    ctx = _cpu_ctx(quick=False)
    out = R.part_tune(ctx)
    assert calls == [(("cpu",), {"device": ctx.device})]
    assert out["notes"] == ["stopped: sdpa: loss off by 0.3 (tolerance 0.01)"]
    assert out["summary"] == "cpu preset: stopped (sdpa: loss off by 0.3 (tolerance 0.01))"


def test_a_report_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    from perflab.course import report as R

    (tmp_path / "report.json").write_text("{broken")
    with pytest.raises(InputError, match=r"report\.json: not JSON \(Expecting property name enclosed in double quotes"):
        R.load_report(tmp_path / "report.json")


def test_a_part_whose_table_cannot_be_drawn_still_shows_its_figures_and_notes():
    from perflab.course import report_html as H

    part = {"title": "Device", "status": "ok", "summary": "a cpu", "data": {"device": "not a dict"},
            "figures": [{"label": "peak fp32", "value": 1.5, "unit": "TFLOP/s"}], "notes": ["a note"],
            "wall_s": 0.1, "measured": "today"}
    page = H._section("device", part)
    assert "<p class='note'>table not drawn: &#x27;str&#x27; object has no attribute &#x27;items&#x27;</p>" in page
    assert "peak fp32" in page and "a note" in page


# ----------------------------------------------------------------------------- widgets
def test_a_panel_refuses_controls_it_does_not_have_and_shows_nothing_for_none():
    from perflab.course import widgets as W

    panel = W.Panel(lambda n: n * 2, n=W.int_slider("n", 1, 1, 4))
    assert panel.set(n=3) == 6
    with pytest.raises(KeyError, match=r"no control named m, z; controls: n"):
        panel.set(z=1, m=2)
    assert panel.values == {"n": 3}
    assert W._outputs(None) == []
