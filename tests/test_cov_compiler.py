"""Lesson 10's edges: factories named the ways people write them (and the ways they get it wrong),
what a factory may return, and lab 10's model check on models that are not done or do not fit."""

from __future__ import annotations

import pytest
import torch

from perflab.compiler import breaks, lab10, models
from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError


@pytest.mark.parametrize("spec, words", [
    ("mymodel.py", "--explain wants MODULE:FACTORY (e.g. mymodel.py:build), got 'mymodel.py'"),
    (":build", "--explain wants MODULE:FACTORY, got ':build'"),
    ("perflab_no_such_module:build", "cannot import 'perflab_no_such_module': no module of that name"),
])
def test_factory_specs_people_get_wrong(spec, words):
    with pytest.raises(InputError) as e:
        breaks.load_factory(spec)
    assert words in str(e.value)


def test_a_module_that_fails_to_import_or_holds_no_factory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perflab_broken_user_mod.py").write_text("import perflab_missing_dependency\n")
    with pytest.raises(InputError, match="importing perflab_broken_user_mod"):
        breaks.load_factory("perflab_broken_user_mod:build")
    (tmp_path / "perflab_user_mod2.py").write_text("build = 3\n")
    with pytest.raises(InputError, match="perflab_user_mod2:build is a int, not a factory"):
        breaks.load_factory("perflab_user_mod2:build")


def test_what_a_factory_may_return():
    lin = torch.nn.Linear(4, 2)
    x = torch.ones(1, 4)
    assert breaks.split_built((lin, (x,), {}))[1] == (x,)
    assert breaks.split_built((lin, x, {"scale": 2}))[1:] == ((x,), {"scale": 2})
    assert breaks.split_built([lin, [x]])[1] == (x,)
    with pytest.raises(InputError, match="returned a tuple of 4 items"):
        breaks.split_built((lin, x, x, x))
    with pytest.raises(InputError, match="the factory's model is a int, which cannot be called"):
        breaks.split_built((3, x))
    with pytest.raises(InputError, match="cannot tell the model's input"):
        breaks.split_built(lambda t: t)


def test_lab10_model_check_on_stubs_and_models_that_do_not_fit(capsys):
    class NotDone(models.BrokenLM):
        def __init__(self, **kw):
            raise NotImplementedError

    assert not lab10.check_model(NotDone)
    assert "not done yet" in capsys.readouterr().out

    class NoArgs(torch.nn.Module):
        def __init__(self):
            super().__init__()

    with pytest.raises(LabCheckError, match="NoArgs\\(\\*\\*.*\\) failed .*subclass BrokenLM and keep its constructor"):
        lab10.check_model(NoArgs)

    class Smaller(torch.nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.emb = torch.nn.Embedding(8, 4)

    with pytest.raises(LabCheckError, match="your model must have BrokenLM's parameters"):
        lab10.check_model(Smaller)


def test_count_executions_counts_each_line_per_call(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    src = tmp_path / "perflab_count_mod.py"
    src.write_text("def child(x):\n    return x + 1\n\n\ndef parent(x):\n    for _ in range(3):\n        x = child(x)\n"
                   "    return x\n")
    import perflab_count_mod as m

    counts = breaks.count_executions(m.parent, (0,), {}, [(str(src), 2), (str(src), 8)])
    assert counts == {(str(src), 2): 3, (str(src), 8): 1}


def test_clear_cache_empties_the_folder_the_inductor_uses(tmp_path, monkeypatch):
    from perflab.compiler import speed

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "inductor" / "fxgraph").mkdir(parents=True)
    assert speed.cache_dir() == tmp_path / "inductor"
    assert speed.clear_cache() == tmp_path / "inductor" and not (tmp_path / "inductor").exists()
