"""The `perflab profile` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from clirun import perflab

from perflab.cli import main

from .helpers import _one_line_error

PLAIN_SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from torch.profiler import profile, schedule, ProfilerActivity
    torch.set_num_threads(1)

    class Slow(torch.utils.data.Dataset):
        def __len__(self): return 64
        def __getitem__(self, i):
            time.sleep(0.02)             # slow storage
            return torch.randn(64), torch.randn(8)

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=2)
    out = sys.argv[1]
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad()
            prof.step()
            if i == 3:
                break
    assert not any(m.startswith("perflab") for m in sys.modules)
""")


def test_profile_folder_with_no_usable_trace(tmp_path):
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_text("[1, 2")
    _one_line_error(perflab("profile", "--trace", str(tmp_path)), "no usable trace among the 2 in")


def test_profile_trace_diagnoses_a_plain_torch_profiler_script(tmp_path, capsys):
    script, trace = tmp_path / "plain.py", tmp_path / "plain_trace.json"
    script.write_text(PLAIN_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert main(["profile", "--trace", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"step_s", "device_busy", "causes", "trace_file", "steps", "step_source", "per_step",
                        "step_times_s", "top_by_step", "stable", "ops_s"}
    assert len(out["step_times_s"]) == len(out["top_by_step"]) == out["steps"] and isinstance(out["stable"], bool)
    assert out["trace_file"] == str(trace)
    assert out["causes"][0]["cause"] == "data_wait" and out["causes"][0]["share"] > 0.5
    assert set(out["causes"][0]) == {"cause", "seconds", "share", "median_share", "evidence"}
    assert "DataLoader" in out["causes"][0]["evidence"][0]["op"]
    secs = [c["seconds"] for c in out["causes"]]
    assert secs == sorted(secs, reverse=True)
