"""The `perflab ettr` command: its output, its JSON, and one line for bad input."""

import json
import math

from perflab.cli import main


def test_cli_ettr_json(capsys):
    assert main(["ettr", "--hours", "720", "--gpus", "1024", "--mtbf-hours", "50000", "--ckpt-minutes", "2",
                 "--restart-minutes", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["ettr"] < 1 and out["interval_source"] == "the optimum"
    assert math.isclose(out["job_mtbf_hours"], 50000 / 1024)
