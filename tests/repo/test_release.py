"""The learners' copy of the course (perflab/classroom/release.py): no solution code in it, no
outputs, and its labs say "not done yet" out of the box."""

from __future__ import annotations

import ast
import json
import os
import zipfile
from pathlib import Path

import pytest

from perflab.classroom import release as R
from perflab.course.nbclean import is_clean

ROOT = Path(__file__).resolve().parents[2]

# Whole solution functions the package has: the lab's check computes its expected answer with it
# (perflab/flops/lab02.py), and `perflab mfu` and lesson 02 use it.
TAUGHT_FUNCTIONS = {("perflab/flops/transformer.py", "palm_flops_per_token"),
                    # a check grades inputs drawn beyond the visible examples, so it computes the right
                    # answer itself: these formulas are the lessons' own (lesson 01's MLP FLOPs and
                    # FLOP/s, lesson 02's MFU and PaLM count, lesson 03's activation bytes); the release ships no worked lab
                    ("perflab/flops/lab01.py", "reference_forward"), ("perflab/flops/lab01.py", "reference_tflops"),
                    ("perflab/flops/lab02.py", "_mfu"), ("perflab/flops/lab02.py", "_palm"),
                    ("perflab/memory/lab03.py", "_act")}

# Statements of a solution that the package has on purpose, each for a reason a lesson gives.
# Anything else that turns up fails the test.
TAUGHT_IN_THE_PACKAGE = {
    # the checks' own references (see TAUGHT_FUNCTIONS): each is a formula its lesson states
    ("perflab/flops/lab01.py", "return 2 * batch * d_in * d_hidden + 2 * batch * d_hidden * d_out"),
    ("perflab/flops/lab01.py", "return 2 * m * n * k / seconds / 1000000000000.0"),
    ("perflab/flops/lab02.py", "return 6 * n_params + 12 * layers * heads * head_dim * seq"),
    ("perflab/flops/lab02.py", "return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1000000000000.0)"),
    ("perflab/memory/lab03.py", "return s * b * h * (34 + 5 * a * s / h)"),
    # lesson 12 predicts every pipeline run with the bubble formula it teaches
    ("perflab/shard/formulas.py", "return (p - 1) / (m + p - 1)"),
    # lesson 06 builds its own ring all-reduce (perflab.distributed.ring) and its bandwidth probe
    ("perflab/distributed/ring.py", "right, left = ((rank + 1) % n, (rank - 1) % n)"),
    ("perflab/distributed/busbw.py", "right, left = ((rank + 1) % n, (rank - 1) % n)"),
    # lesson 02 shows PaLM's FLOPs per token (perflab.flops.transformer)
    ("perflab/flops/transformer.py", "return 6 * n_params + 12 * layers * heads * head_dim * seq"),
    # the model that lab 10 rewrites computes its rotary embedding the same way
    ("perflab/compiler/models.py", "cos, sin = (angles.cos().to(x.dtype), angles.sin().to(x.dtype))"),
    # an empty list and no previous item
    ("perflab/gemm/waves.py", "out, prev = ([], None)"),
}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    return R.build_release(out, ROOT)


def _distinctive(prints: dict[str, str]) -> dict[str, str]:
    """Statements of a dozen syntax nodes or more: `return out` is everyone's, a formula is not."""
    return {k: v for k, v in prints.items() if len(list(ast.walk(ast.parse(k)))) >= 12}


@pytest.mark.slow
def test_the_release_has_no_solution_code(release):
    folder, zpath = release
    prints = R.solution_fingerprints(ROOT / "labs")
    assert len(prints) > 20  # the solutions were read
    assert not (folder / "labs" / "solutions").exists()
    with zipfile.ZipFile(zpath) as z:
        names = z.namelist()
    assert names and not [n for n in names if "solutions" in n or n.startswith("perflab-course/tests/")]
    # no solution function, whole, anywhere
    bodies = {}
    for sol in (ROOT / "labs" / "solutions").glob("*.ipynb"):
        stubs = {name: "\n".join(R._statements(fn)) for name, fn in R._functions(ROOT / "labs" / sol.name).items()}
        # a function the learner fills in; a helper the lab gives whole (the same body in both) is no answer
        bodies.update({body: f"{sol.name}: {name}" for name, fn in R._functions(sol).items()
                       if name in stubs and (body := "\n".join(R._statements(fn))) != stubs[name]})
    whole = [f"{p.relative_to(folder)}: {fn.name} is {bodies[b]}" for p in folder.rglob("*") if p.suffix in (".py", ".ipynb")
             for fn in R._functions(p).values() if (b := "\n".join(R._statements(fn))) in bodies
             and (str(p.relative_to(folder)), fn.name) not in TAUGHT_FUNCTIONS]
    assert not whole, whole
    # no distinctive statement of a solution, except what a lesson teaches in the package
    found = R.solution_code_in(folder, _distinctive(prints))
    unexpected = [f for f in found if (f.split(": ")[0], next(k for k in prints if f.split(": ", 1)[1].startswith(k[:60])))
                  not in TAUGHT_IN_THE_PACKAGE]
    assert not unexpected, "\n".join(unexpected)
    # the checker finds them where they are: in the solutions themselves
    assert len(R.solution_code_in(ROOT / "labs" / "solutions", _distinctive(prints))) >= len(_distinctive(prints))


@pytest.mark.slow
def test_the_release_notebooks_have_no_outputs(release):
    folder, _ = release
    nbs = list(folder.rglob("*.ipynb"))
    assert len(nbs) >= 10
    dirty = [str(p) for p in nbs if not is_clean(json.loads(p.read_text()))]
    assert not dirty, dirty
    assert (folder / "perflab" / "__init__.py").is_file() and (folder / "tools" / "setup_env.py").is_file()
    readme = (folder / "README.md").read_text()
    assert "Solutions are in `labs/solutions/`" not in readme and "Your teacher has the solutions." in readme


@pytest.mark.slow
def test_a_release_lab_says_not_done_yet_out_of_the_box(release, tmp_path):
    """Lab 01 as the release ships it, run by the grader against the release's own package."""
    pytest.importorskip("papermill")
    from perflab.classroom import gradebook as G

    folder, _ = release
    labs = G.course_labs(folder / "labs")
    sub = G.Submission("learner", labs["01"], folder / "labs" / "01_flops.ipynb")
    env = dict(os.environ, PYTHONPATH=str(folder))
    rec = G.grade_one(sub, timeout=50, limits=G.Limits(memory_bytes=None), env=env)
    assert rec.outcome == "not done", rec
    assert rec.message.startswith("3 of 3 checks not done")
