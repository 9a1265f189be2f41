"""Every notebook and lab runs under papermill with smoke=True (twice in the same kernel under
`make test-all`, PERFLAB_NOTEBOOK_PASSES=2: every cell can be re-run).

The executed copies are written to $PERFLAB_EXECUTED (default: a temporary folder that the site
test reads).
Each executed notebook's outputs (widgets' included) are then scanned for readouts a person should
not have to read (tests/readout_scan.py): a raw dataclass repr, a float with more than 6
significant digits. The scan reads the run that just happened; nothing executes twice.
"""

import pytest
from nbrun import ROOT, all_notebooks, run_notebook
from readout_scan import scan

NOTEBOOKS = all_notebooks()


@pytest.fixture(scope="module")
def out_dir(executed_dir):
    return executed_dir  # tests/conftest.py: $PERFLAB_EXECUTED, or a folder the site test reads too


def test_there_are_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert any(n.startswith("00_") for n in names), names
    assert len(list((ROOT / "labs").glob("*.ipynb"))) == len(list((ROOT / "labs" / "solutions").glob("*.ipynb")))


@pytest.mark.notebooks
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_runs(path, out_dir):
    nb, _seconds = run_notebook(path, out_dir)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors[0]
    unreadable = scan(nb, f"{path.parent.name}/{path.name}")
    assert not unreadable, ("readouts must be formatted for a person (perflab.core.readout):\n"
                            + "\n".join(unreadable[:20]) + (f"\n... and {len(unreadable) - 20} more" if len(unreadable) > 20 else ""))
    # the first code cell is the papermill parameters cell, and smoke mode must keep a lesson quick
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert tagged, f"{path.name}: no cell tagged 'parameters'"
    # its time is recorded by the suite clock (tests/suite_clock.py) and held against the 60 s a lesson may
    # take by tools/suite_budget.py: a slower machine never fails a correct notebook
