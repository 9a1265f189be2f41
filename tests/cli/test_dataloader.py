"""The `perflab dataloader` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

from clirun import perflab


def test_dataloader_reports_a_worker_that_hangs():
    r = perflab("dataloader", "--workers", "1", "--io-ms", "200", "--timeout", "0.05", "--batches", "2", "--batch", "1",
                "--compute-ms", "1", "--device", "cpu")
    assert r.returncode == 1, r.stderr
    row = r.stdout.splitlines()[2]
    assert row.split()[:2] == ["1", "failed:"] and "no batch within timeout=0.05 s" in row


def test_a_row_measured_on_a_busy_machine_says_so_in_the_readout_and_the_json(watch_all_cores):
    # the issue: other programs ran while the loop was measured, and the row said nothing. Here made-up
    # load (half of every core) stands for them: the row's machine column and its JSON say disturbed.
    import json

    from perflab.core.quietness import MadeUpLoad, injected

    args = ("dataloader", "--workers", "0", "--batch", "2", "--io-ms", "1", "--transform-ms", "0", "--compute-ms", "2",
            "--batches", "3", "--device", "cpu")
    with injected(MadeUpLoad(0.5, tick_s=1e-4)):
        text = perflab(*args)
        js = perflab(*args, "--json")
    assert text.returncode == 0, text.stderr
    row = text.stdout.splitlines()[2]
    assert row.split()[0] == "0" and "disturbed: other programs used 50 % of" in row, text.stdout
    assert "1 of 1 setting measured while other programs used the cores" in text.stdout
    (got,) = json.loads(js.stdout)
    assert got["disturbed"] is True and got["quietness"]["verdict"] == "disturbed"
    assert {"workers", "step_s", "data_wait_s", "wait_fraction", "predicted_wait_s", "first_wait_s",
            "compute_share"} <= set(got)  # the keys it printed before stay


def test_a_quiet_row_says_machine_quiet(watch_all_cores):
    from perflab.core.quietness import MadeUpLoad, injected

    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        r = perflab("dataloader", "--workers", "0", "--batch", "2", "--io-ms", "1", "--compute-ms", "2", "--batches", "3",
                    "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].endswith("machine quiet") and "measured while other programs" not in r.stdout
