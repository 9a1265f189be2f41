"""More of lesson 10's edges: the graph-break report read from dynamo's log and from the break
reasons the log missed, the line counter's trace hooks, user factories that fail in the ways user
code does, checkpointing and panel refusals, the parity and speed records, and lab 10's checks on
answers of the wrong shape or kind. dynamo's tracer and the inductor are replaced by fakes where
only perflab's handling of what they return is under test."""

from __future__ import annotations

import logging
import sys
import traceback
from types import SimpleNamespace

import pytest
import torch

from perflab.compiler import breaks, checkpointing, lab10, models, panel, parity, speed
from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError

# ----------------------------------------------------------------------------- the break report


def test_a_log_record_that_cannot_be_formatted_is_left_out():
    collect = breaks._Collect()
    bad = logging.LogRecord("torch._dynamo", logging.DEBUG, __file__, 1, "%d graph breaks", ("many",), None)
    good = logging.LogRecord("torch._dynamo", logging.DEBUG, __file__, 1, "%d graph breaks", (2,), None)
    collect.emit(bad)
    collect.emit(good)
    assert collect.messages == ["2 graph breaks"]


def test_a_message_without_a_user_code_site_names_no_site():
    assert breaks._site_of_message("Recompiling function forward: a guard failed") is None
    msg = 'Graph break in user code at /src/model.py:12\n  File "/src/model.py", line 12, in forward\n    print(x)'
    assert breaks._site_of_message(msg) == ("/src/model.py", 12, "forward")


def test_explain_reads_the_log_and_adds_the_break_reasons_it_missed(monkeypatch):
    def fake_explain(fn):
        def run(*args, **kwargs):
            log = logging.getLogger(breaks.BREAK_LOGGERS[0])
            log.debug("Recompiling function forward: a guard failed")  # no site: not a break
            log.debug("Graph break in user code at /src/model.py:12\nGraph Break Reason: Call to `print`\n"
                      "Explanation: print is a side effect\n"
                      '  File "/src/model.py", line 12, in forward')
            return SimpleNamespace(graph_count=3, graph_break_count=1, op_count=7, break_reasons=[
                SimpleNamespace(user_stack=[], reason="a break with no user frame"),
                SimpleNamespace(user_stack=[traceback.FrameSummary("/src/model.py", 12, "forward")],
                                reason="the site the log named"),
                SimpleNamespace(user_stack=[traceback.FrameSummary("/src/layers.py", 30, "rope")],
                                reason="Graph Break Reason: complex numbers\nExplanation: complex tensors are not traced"),
            ])
        return run

    monkeypatch.setattr(torch._dynamo, "explain", fake_explain)
    rep = breaks.explain(lambda x: x, torch.ones(1))
    assert (rep.graphs, rep.graph_breaks, rep.ops) == (3, 2, 7)
    assert [(b["where"], b["reason"], b["file"], b["line"]) for b in rep.breaks] == [
        ("model.py:12 in forward", "Call to `print`: print is a side effect", "/src/model.py", 12),
        ("layers.py:30 in rope", "complex numbers: complex tensors are not traced", "/src/layers.py", 30)]


def test_the_line_counter_hooks_count_only_the_site_lines_of_the_site_files(tmp_path):
    site = str(tmp_path / "model.py")
    c = breaks._LineCounter([(site, 3)])

    def frame(path, line):
        return SimpleNamespace(f_code=SimpleNamespace(co_filename=path), f_lineno=line)

    assert c.calls(frame(site, 1), "call", None) == c.local
    assert c.calls(frame(site, 1), "return", None) is None
    assert c.calls(frame(str(tmp_path / "other.py"), 1), "call", None) is None
    for line, event in ((3, "line"), (4, "line"), (3, "line"), (3, "return")):
        assert c.local(frame(site, line), event, None) == c.local
    assert c.counts == {(site, 3): 2}
    assert c.where(SimpleNamespace(co_filename=site)) == site and c.real == {site: site, str(tmp_path / "other.py"):
                                                                             str(tmp_path / "other.py")}


# ----------------------------------------------------------------------------- user factories


def test_a_model_file_python_cannot_load_is_refused(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text("def build():\n    pass\n")
    with pytest.raises(InputError, match=f"^cannot load {path} as Python$"):
        breaks.load_factory(f"{path}:build")


def test_a_module_that_raises_while_importing_is_the_users_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perflab_cov2_raises_on_import.py").write_text("raise ValueError('vocab must be set')\n")
    with pytest.raises(breaks.UserCodeError, match="^importing perflab_cov2_raises_on_import raised ValueError: vocab "
                                                   "must be set \\(at perflab_cov2_raises_on_import.py:1 in <module>\\); "
                                                   "this is your model's error"):
        breaks.load_factory("perflab_cov2_raises_on_import:build")


def test_example_input_reads_the_vocabulary_of_an_embed_layer_or_refuses():
    class Embedded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 4)

    x = breaks.example_input(Embedded(), batch=3, seq=5)
    assert torch.equal(x, torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(0)))
    with pytest.raises(InputError, match="^cannot tell the model's input: let the factory return \\(model, "
                                         "example_inputs\\), where example_inputs is a tensor"):
        breaks.example_input(torch.nn.Linear(2, 2))


def test_classes_given_in_place_of_a_factory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perflab_cov2_classes.py").write_text(
        "class Odd:\n    __signature__ = 'not a signature'\n\n\nBuiltin = dict\n")
    # no signature to show: the refusal says so without one
    with pytest.raises(InputError, match="^perflab_cov2_classes:Odd is a class that needs arguments, not a factory: "
                                         "write a function .* def build\\(\\): return Odd\\(...\\)"):
        breaks.build_from_factory("perflab_cov2_classes:Odd")
    # a class with no signature at all (a builtin) is called with none; what it builds is then judged
    with pytest.raises(InputError, match="^the factory's model is a dict, which cannot be called"):
        breaks.build_from_factory("perflab_cov2_classes:Builtin")


def test_a_model_the_tracer_cannot_trace_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "tiny_model.py").write_text(
        "import torch\n\n\ndef build():\n    return torch.nn.Linear(2, 2), torch.ones(1, 2)\n")

    def tracer_fails(fn, *args, **kwargs):
        raise RuntimeError("dynamo met\n   an internal limit")

    monkeypatch.setattr(breaks, "explain", tracer_fails)
    spec = f"{tmp_path / 'tiny_model.py'}:build"
    with pytest.raises(InputError) as e:
        breaks.explain_factory(spec)
    assert str(e.value) == (f"torch._dynamo could not trace the model from {spec} (eager runs): "
                            "RuntimeError: dynamo met an internal limit")


# ----------------------------------------------------------------------------- checkpointing


def test_a_checkpointed_block_runs_plainly_without_grad():
    lin = torch.nn.Linear(3, 2)
    block = checkpointing.Checkpointed(lin, selective=True)
    x = torch.ones(4, 3)
    with torch.no_grad():
        out = block(x)
    assert torch.equal(out, lin(x).detach()) and not out.requires_grad


def test_checkpointing_refuses_unknown_kinds_and_models_without_blocks():
    with pytest.raises(InputError, match="^unknown checkpointing 'some': use one of none, full, selective$"):
        checkpointing.apply(torch.nn.Linear(2, 2), "some")
    with pytest.raises(InputError, match="^checkpointing wraps a model's `blocks` \\(an nn.ModuleList\\); Linear has none$"):
        checkpointing.apply(torch.nn.Linear(2, 2), "full")
    with pytest.raises(InputError, match="^unknown checkpointing 'half': use one of none, full, selective$"):
        checkpointing.hardware_flops(None, 1, 8, "half")


# ----------------------------------------------------------------------------- panel, parity, speed


def test_the_panel_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="^mode must be one of default, reduce-overhead, max-autotune, got 'fast'$"):
        panel.compile_view("fast", "fp32", "default")


def test_the_panel_hands_each_graph_to_the_inductor(monkeypatch):
    seen = []

    def compile_fx(gm, example_inputs, config_patches=None):  # stands in for the inductor's minutes-long compile
        seen.append(config_patches)
        return gm.forward

    monkeypatch.setitem(sys.modules, "torch._inductor.compile_fx", SimpleNamespace(compile_fx=compile_fx))
    monkeypatch.setattr(panel, "LENGTHS", (16,))
    df = panel.compile_view("default", "fp32", "dynamic=False", backend="inductor", reps=1)
    assert seen == [None]
    assert df[["seq", "recompiled", "graphs so far"]].to_dict("records") == [{"seq": 16, "recompiled": "yes",
                                                                              "graphs so far": 1}]


def test_parity_record_and_a_wrong_length_of_eager_losses():
    p = parity.Parity([2.0, 1.0], [2.0, 1.5], [0.0, 0.5], [0.0, 0.5], 1e-4)
    assert p.as_dict() == {"eager": [2.0, 1.0], "compiled": [2.0, 1.5], "max_loss_abs_diff": 0.5,
                           "max_loss_rel_diff": 0.5, "tolerance": 1e-4, "ok": False}
    with pytest.raises(InputError, match="^eager has 2 losses for 5 steps$"):
        parity.check(torch.nn.Linear(2, 2), [], steps=5, eager=[2.0, 1.0])


def test_speed_record_and_the_mode_passed_to_compile(monkeypatch):
    s = speed.Speed(eager_step_s=0.5, compiled_step_s=0.25, compile_s=5.0, mode="default")
    assert s.as_dict() == {"eager_step_s": 0.5, "compiled_step_s": 0.25, "speedup": 2.0, "compile_s": 5.0,
                           "break_even_steps": 20, "mode": "default"}
    calls = []

    def time_steps(model, batches, steps, *, compile_kw=None, warmup=1):
        calls.append(compile_kw)
        return (4.0, 0.5) if compile_kw is not None else (1.0, 0.25)

    monkeypatch.setattr(speed, "time_steps", time_steps)
    said = []
    r = speed.measure(lambda: torch.nn.Linear(2, 2), [], 3, mode="max-autotune", backend="aot_eager", progress=said.append)
    assert calls == [None, {"backend": "aot_eager", "mode": "max-autotune"}]
    assert (r.eager_step_s, r.compiled_step_s, r.compile_s, r.mode) == (0.25, 0.5, 3.5, "max-autotune")
    assert said[1].startswith("2/2 compiled (aot_eager)")


# ----------------------------------------------------------------------------- lab 10


@pytest.mark.parametrize("student, words", [
    (lambda x, angles: None, "rope_real: returned None for x of shape (2, 2, 8, 16); did you forget `return`?"),
    (lambda x, angles: x[..., :-1], "rope_real: for x of shape (2, 2, 8, 16) expected a tensor of the same shape, "
                                    "got (2, 2, 8, 15)"),
    (lambda x, angles: x.tolist(), "rope_real: for x of shape (2, 2, 8, 16) expected a tensor of the same shape, got list"),
    (lambda x, angles: x.to(torch.complex64), "rope_real: the result is complex; compute the rotation with real tensors"),
])
def test_lab10_rope_check_names_what_is_wrong_with_the_result(student, words):
    with pytest.raises(LabCheckError) as e:
        lab10.check_rope(student)
    assert str(e.value) == words


def test_lab10_model_check_refuses_logits_of_the_wrong_shape():
    class LastTokenOnly(models.BrokenLM):
        rope = staticmethod(lambda x, angles: x)

        def forward(self, idx):
            x = self.embed(idx)
            for blk in self.blocks:
                x = self.block(blk, x, self.angles[: idx.shape[1]])
            return self.head(self.norm(x))[:, -1]

    with pytest.raises(LabCheckError) as e:
        lab10.check_model(LastTokenOnly)
    assert str(e.value) == "no graph breaks: for input ids of shape (2, 16) expected logits of shape (2, 16, 64), got (2, 64)"
