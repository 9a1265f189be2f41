"""The judge of `perflab grade` (perflab/classroom/judge.py): forged submissions are never `done`,
right ones are, and the learner's answers are taken from the notebook's source by name.

Each forgery is a shipped lab notebook with cells added, as a learner would submit it. The judge
grades it the way `perflab grade` does after the kernel run, which can only lower a grade: its answer
worker confined by the sandbox where one is available (as `perflab grade` confines it; a root CI
machine has bubblewrap). The lab-07 forgeries also go through a whole sandboxed class grading, kernel
included, in tests/unit/classroom/test_sandbox.py (a class grading of all of them would start a kernel of
each lab for each: several times slower than this judge-only path, which costs what the unconfined
one did)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from perflab.classroom import judge

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "labs"
NOT_DONE = ("wrong", "not done", "error")


def shipped(lab: str) -> dict:
    return json.loads((LABS / f"{lab}.ipynb").read_text())


def solution(lab: str) -> dict:
    return json.loads((LABS / "solutions" / f"{lab}.ipynb").read_text())


def forged(lab: str, *cells: str, base: dict | None = None) -> dict:
    """The shipped lab (or `base`) with code cells appended at its end."""
    nb = copy.deepcopy(base or shipped(lab))
    nb["cells"] += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                    for c in cells]
    return nb


def grade(lab: str, nb: dict, learner: str = "mallory") -> tuple[str, str]:
    """The judge's verdict, its answer worker confined as `perflab grade` confines it (where the
    sandbox is available; else unconfined, as `--no-sandbox` grades)."""
    from perflab.classroom import gradebook as gb
    from perflab.classroom import sandbox

    box = sandbox.find()
    hidden = [str(p) for p in gb.hidden_from_learners(LABS, {})] if box else []
    return judge.verdict(nb, shipped(lab), learner=learner, secret="corpus", course_dirs=[str(LABS)],
                         memory_bytes=4 * 2**30, cpu_s=120, sandbox=box, hidden=hidden)


def grade_apart(lab: str, nb: dict, tmp_path: Path, learner: str = "mallory") -> tuple[str, str]:
    """As `perflab grade` does: the judge in a process of its own, one thread each for it and its worker
    (what a timed lab needs: a judge with more threads than its worker would time a different step)."""
    from perflab.classroom.runner import Limits, run_judge
    from perflab.classroom.submissions import Submission, course_labs

    path = tmp_path / learner / f"{lab}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    course = course_labs(LABS)[lab.split("_")[0]]
    return run_judge(Submission(learner, course, path), secret="corpus", timeout=300,
                     limits=Limits(memory_bytes=4 * 2**30, cpu_s=300), threads=1)


RIGHT_LCG = '''
def lcg_index(i, n, a, c, x0):
    m = lab.modulus(n)

    def state(j):
        acc_a, acc_c, pa, pc = 1, 0, a, c
        while j:
            if j & 1:
                acc_a, acc_c = acc_a * pa % m, (acc_c * pa + pc) % m
            pa, pc = pa * pa % m, (pc * pa + pc) % m
            j >>= 1
        return (acc_a * x0 + acc_c) % m

    y = state(i)
    while y >= n:
        y = state(y)
    return y
'''

# (lab, what it does, the cells added to the shipped notebook): none has a right answer of its own
FORGERIES = [
    ("07_shuffle", "_RESULTS written", ["from perflab.grading import checks as grading\ngrading._RESULTS['lcg_index'] = 'passed'"]),
    ("07_shuffle", "a check replaced", ["from perflab.grading import checks as grading\n"
                                        "lab.check_index = lambda f: grading.record('lcg_index', True)\n"
                                        "lab.check_index(lcg_index)"]),
    ("01_flops", "record replaced", ["from perflab.grading import checks as grading\n_real = grading.record\n"
                                     "grading.record = lambda name, passed: _real(name, True)\n"
                                     "grading._RESULTS.update({k: 'passed' for k in grading._RESULTS})"]),
    ("04_cliffs", "summary replaced", ["from perflab.grading import checks as grading\n"
                                       "grading.summary = lambda *a, **k: grading.Summary(tiles='passed', waves='passed', "
                                       "predict_cliffs='passed')"]),
    ("07_shuffle", "the marker line printed by hand", ["print('PERFLAB-GRADE end')\n"
                                                       "print('PERFLAB-GRADE {\"lcg_index\": \"passed\"}')"]),
    ("12_sharding", "the kernel ended early, and the answer ends the grader's worker",
     ["def bubble(p, m):\n    import os\n    os._exit(0)", "import os\nprint('PERFLAB-GRADE end')\nos._exit(0)"]),
    ("04_cliffs", "perflab's answer through importlib",
     ["import importlib\n\ndef tiles(m, n, tile_m, tile_n):\n"
      "    return importlib.import_module('perflab.gemm.shapes').tile_count(m, n, tile_m, tile_n)"]),
    ("01_flops", "perflab's answer through sys.modules",
     ["import sys\n\ndef mlp_forward_flops(batch, d_in, d_hidden, d_out):\n"
      "    return sys.modules['perflab.flops.lab01'].reference_forward(batch, d_in, d_hidden, d_out)"]),
    ("12_sharding", "perflab's answer through __import__",
     ["def bubble(p, m):\n    return __import__('perflab.shard.formulas', fromlist=['x']).bubble_fraction(p, m)"]),
    ("07_shuffle", "the answer read from the solutions folder",
     ["import json, os, perflab\n\ndef lcg_index(i, n, a, c, x0):\n"
      "    path = os.path.join(os.path.dirname(perflab.__file__), '..', 'labs', 'solutions', '07_shuffle.ipynb')\n"
      "    src = [''.join(c['source']) for c in json.load(open(path))['cells'] if 'def lcg_index' in ''.join(c['source'])]\n"
      "    ns = {'lab': lab}\n    exec(src[0].split('lab.check_index')[0], ns)\n    return ns['lcg_index'](i, n, a, c, x0)"]),
    ("01_flops", "the answer read from a file of the package",
     ["import perflab.flops.lab01 as _m\n\ndef mlp_forward_flops(batch, d_in, d_hidden, d_out):\n"
      "    ns = {}\n    exec(open(_m.__file__).read().split('FORWARD_MISTAKES')[0], ns)\n"
      "    return ns['reference_forward'](batch, d_in, d_hidden, d_out)"]),
    ("12_sharding", "a lookup table for the inputs the notebook shows",
     ["_SEEN = {(1, 4): 0.0, (2, 1): 0.5, (4, 8): 3 / 11, (8, 32): 7 / 39, (3, 2): 0.5}\n\n"
      "def bubble(p, m):\n    return _SEEN.get((p, m), 0.25)",
      "def fsdp_bytes(params, nproc):\n    return 16 * params / nproc"]),
    ("07_shuffle", "a lookup table: the checks' own cases, computed once in the kernel",
     ["from perflab.dataloading.shuffle import LCGPermutation\n"
      "_T = {(n, s): list(LCGPermutation(n, s)) for n, s in lab.CASES}\n"
      "_P = {(n, p.a, p.c, p.x0): (n, s) for n, s in lab.CASES for p in [LCGPermutation(n, s)]}\n\n"
      "def lcg_index(i, n, a, c, x0):\n    return _T[_P[(n, a, c, x0)]][i] if (n, a, c, x0) in _P else i"]),
    ("04_cliffs", "detects the grader (environment, call stack) and answers differently",
     ["import inspect, os, sys\n\ndef waves(tiles, sms):\n"
      "    graded = 'PERFLAB_RESULTS' not in os.environ or not any('grading' in f.filename for f in inspect.stack())\n"
      "    if graded:  # read the expected value from the caller, or take perflab's\n"
      "        for f in inspect.stack():\n"
      "            if 'want' in f.frame.f_locals:\n                return f.frame.f_locals['want']\n"
      "        return sys.modules['perflab.gemm.shapes'].wave_count(tiles, sms)\n"
      "    return -(-tiles // sms)\n\n"
      "def tiles(m, n, tile_m, tile_n):\n    return -(-m // tile_m) * -(-n // tile_n)"]),
    ("04_cliffs", "the reference's code copied into a new function",
     ["import types, perflab.gemm.shapes as S\n"
      "tiles = types.FunctionType(S.tile_count.__code__, S.tile_count.__globals__)"]),
    ("07_shuffle", "the tracer turned off to hide a call to perflab",
     ["import sys\n\ndef lcg_index(i, n, a, c, x0):\n    sys.setprofile(None)\n"
      "    from perflab.dataloading.shuffle import LCGPermutation\n    return LCGPermutation(n, 0)[i]"]),
]


@pytest.mark.parametrize("lab,what,cells", FORGERIES, ids=[w for _, w, _ in FORGERIES])
def test_a_forged_submission_is_never_done(lab, what, cells):
    outcome, message = grade(lab, forged(lab, *cells))
    assert outcome in NOT_DONE, (what, outcome, message)
    assert message


def test_a_clock_patched_to_meet_a_speed_target_is_wrong(tmp_path):
    """Lab 02's own timing, with `time.perf_counter` slowed 50× in the notebook: the judge times the
    same step itself, in its own process, and the learner's tokens/s is far faster than any it sees."""
    patch = "import time\n_real_clock = time.perf_counter\ntime.perf_counter = lambda: _real_clock() / 50"
    outcome, message = grade_apart("02_mfu", forged("02_mfu", patch, base=solution("02_mfu")), tmp_path)
    assert outcome == "wrong" and "tokens/s" in message and "faster" in message, (outcome, message)


def test_the_forgeries_cover_the_kinds_the_issue_lists():
    labs = {lab for lab, _, _ in FORGERIES} | {"02_mfu", "11_capstone"}  # the clock, the predictions below
    assert len(FORGERIES) >= 12 and len(labs) >= 6


def _predictions_cell(nb: dict) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if "my_predictions = " in "".join(c["source"]))


def test_a_prediction_written_after_its_measurement_is_wrong():
    nb = solution("11_capstone")
    line = next(ln for ln in "".join(nb["cells"][_predictions_cell(nb)]["source"]).splitlines()
                if ln.startswith("my_predictions = "))
    # the predictions written again, below the cell that measured the plan
    outcome, message = grade("11_capstone", forged("11_capstone", line, base=nb))
    assert outcome == "wrong" and "after the measurement" in message, (outcome, message)


def test_a_prediction_computed_instead_of_written_is_wrong():
    nb = shipped("11_capstone")
    k = _predictions_cell(nb)
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "plan = ['adamw', 'sdpa']\nmy_predictions = {r: 1.0 + 0.1 * len(r) for r in plan}"}
    nb["cells"].insert(k + 1, cell)  # before the measurement, but not a number written down
    outcome, message = grade("11_capstone", nb)
    assert outcome == "wrong" and "computed" in message, (outcome, message)


def test_the_right_answer_with_a_patched_grader_in_the_notebook_is_still_done():
    nb = forged("07_shuffle", RIGHT_LCG, "from perflab.grading import checks as grading\ngrading.summary = None\nlab.check_index = print")
    assert grade("07_shuffle", nb, learner="ada")[0] == "done"


def test_the_grading_inputs_differ_per_learner_and_per_secret():
    a = judge.learner_rng("s", "ada", "lab07").random()
    assert a == judge.learner_rng("s", "ada", "lab07").random()
    assert a != judge.learner_rng("s", "bob", "lab07").random() != judge.learner_rng("t", "ada", "lab07").random()


FAST_SOLUTIONS = ["04_cliffs", "04b_tile_config", "05_swiglu_width", "07_shuffle", "08_numa", "12_sharding", "15_at_scale"]
FAST_SOLUTIONS.append("16_fp8_rowwise")  # lesson 16's lab: graded done as solved, not done as shipped
SLOW_SOLUTIONS = ["01_flops", "02_mfu", "03_memory", "06_ring_allreduce", "09_diagnose", "10_graph_breaks",
                  "11_capstone"]


@pytest.mark.parametrize("lab", FAST_SOLUTIONS + [pytest.param(x, marks=pytest.mark.slow) for x in SLOW_SOLUTIONS])
def test_every_solution_is_done_and_every_stub_is_not(lab, tmp_path):
    timed = lab in ("02_mfu", "03_memory", "11_capstone")  # measured by the judge: graded as perflab grade does
    outcome, message = grade_apart(lab, solution(lab), tmp_path, "ada") if timed else grade(lab, solution(lab), "ada")
    busy = timed and outcome == "not done" and message.startswith("inconclusive:") and "machine was busy" in message
    assert outcome == "done" or busy, (lab, outcome, message)  # a busy machine gives no verdict either way
    if lab in FAST_SOLUTIONS:
        assert grade(lab, shipped(lab))[0] == "not done"


def test_the_references_are_the_labs_answers():
    """Each lab's REFERENCES agree with what its checks expect (a few labs, exhaustively or on their cases)."""
    from perflab.dataloading import lab07
    from perflab.dataloading.shuffle import LCGPermutation
    from perflab.flops import lab01
    from perflab.shard import lab12

    for n, seed in lab07.CASES + [(1000, 3), (4097, 11)]:
        p = LCGPermutation(n, seed)
        assert [lab07.reference_index(i, n, p.a, p.c, p.x0) for i in range(n)] == list(p)
    for b, i, h, o in lab01.CASES:
        assert lab01.REFERENCES["mlp_forward_flops"](b, i, h, o) == lab01.counted_forward(b, i, h, o)
        assert lab01.REFERENCES["mlp_train_flops"](b, i, h, o) == lab01.counted_train_step(b, i, h, o)
    assert lab12.REFERENCES["bubble"](4, 8) == pytest.approx(3 / 11)
    assert lab12.REFERENCES["fsdp_bytes"](10**6, 4) == 4 * 10**6


def test_the_outcome_is_done_only_when_every_check_passed_and_says_when_a_busy_machine_left_one_open():
    from perflab.classroom.judge import outcome_of

    assert outcome_of({}) == ("not done", "no check ran")
    assert outcome_of({"a": "passed", "b": "passed"})[0] == "done"
    assert outcome_of({"a": "passed", "b": "wrong"}) == ("not done", "1 of 2 checks not done: b")
    out, why = outcome_of({"a": "passed", "b": "inconclusive"})
    assert out == "not done" and why.startswith("inconclusive: b measured while the machine was busy")
