"""Write the trace corpus: plain `torch.profiler` scripts in the styles people use, none through perflab.

    python tests/corpus/make_traces.py      # rewrites tests/corpus/traces/

Each style is how a user would profile their own loop: with and without a `schedule`, calling
`prof.step()` or not, exporting with `export_chrome_trace` or `tensorboard_trace_handler` (plain
and gzip), one inference-only loop, and one loop whose DataLoader sleeps (a planted data wait).
The malformed variants are derived from these files at test time by the trace tests (`tests/unit/profiling/`).
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

OUT = Path(__file__).parent / "traces"
STEPS = 4


class SlowData(torch.utils.data.Dataset):
    def __init__(self, sleep_s: float = 0.0):
        self.sleep_s = sleep_s

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.randn(32), torch.randn(8)


def parts():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, opt


def train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def style_no_schedule(step_markers: bool, name: str):
    model, opt = parts()
    data = torch.utils.data.DataLoader(SlowData(), batch_size=8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i, (x, y) in enumerate(data):
            if i == STEPS:
                break
            train_step(model, opt, x, y)
            if step_markers:
                prof.step()
    prof.export_chrome_trace(str(OUT / name))


def style_schedule_handler(dirname: str, use_gzip: bool):
    model, opt = parts()
    d = OUT / dirname
    shutil.rmtree(d, ignore_errors=True)
    data = torch.utils.data.DataLoader(SlowData(), batch_size=8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(d), worker_name="worker0", use_gzip=use_gzip)) as prof:
        for i, (x, y) in enumerate(data):
            if i == STEPS + 1:
                break
            train_step(model, opt, x, y)
            prof.step()


def style_inference(name: str):
    model, _ = parts()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            model(torch.randn(8, 32))
    prof.export_chrome_trace(str(OUT / name))


def style_data_wait(name: str, late_export: str):
    """A DataLoader that sleeps 2 ms per sample (16 ms per batch): a planted data wait. Exported in
    on_trace_ready; the same loop exported after the schedule's cycle gives `late_export`, the
    empty trace people get when they export outside on_trace_ready."""
    model, opt = parts()
    data = torch.utils.data.DataLoader(SlowData(sleep_s=0.002), batch_size=8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(OUT / name))) as prof:
        for i, (x, y) in enumerate(data):
            if i == STEPS:
                break
            train_step(model, opt, x, y)
            prof.step()
    prof.export_chrome_trace(str(OUT / late_export))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    style_no_schedule(True, "no_schedule_steps.json")
    style_no_schedule(False, "no_schedule_no_steps.json")
    style_schedule_handler("tb_handler", use_gzip=False)
    style_schedule_handler("tb_handler_gz", use_gzip=True)
    style_inference("inference_no_steps.json")
    style_data_wait("data_wait.json", "exported_after_schedule.json")
    raw = (OUT / "no_schedule_steps.json").read_bytes()
    (OUT / "gzip_bytes_named.json").write_bytes(gzip.compress(raw, mtime=0))  # gzip under a .json name
    events = json.loads(raw)["traceEvents"]
    (OUT / "json_array.json").write_text(json.dumps(events))  # the Chrome format's array form
    print("\n".join(sorted(str(p.relative_to(OUT)) for p in OUT.rglob("*") if p.is_file())))


if __name__ == "__main__":
    main()
