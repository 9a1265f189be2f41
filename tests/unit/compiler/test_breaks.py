"""perflab.compiler.breaks on a graph break inside a loop: one `print` in a child module that the
forward calls three times. Breaks are counted once per site (with how often the site runs); graphs
and ops are what the compiler really made, as torch._dynamo.explain and a counting backend see them
in a training step (gradients on)."""

import textwrap

import torch

from perflab.compiler import breaks

LOOP = '''
import torch


class Child(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = torch.relu(self.lin(x))
        print("inside child")
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        for _ in range(3):
            x = self.child(x)
        return x


def build():
    return Model(), torch.randn(2, 8)
'''


def test_a_break_in_a_loop_reports_the_compilers_own_graphs_and_ops(tmp_path, capsys):
    f = tmp_path / "loopbreak.py"
    f.write_text(textwrap.dedent(LOOP))
    rep = breaks.explain_factory(f"{f}:build")
    assert rep.graph_breaks == 1 and rep.breaks[0]["hits"] == 3 and rep.breaks[0]["line"] == 12
    # the same counts from torch itself: dynamo's explain and a backend that counts what it is handed
    model, x = breaks.build_from_factory(f"{f}:build")[:2]
    torch._dynamo.reset()
    e = torch._dynamo.explain(model)(*x)
    assert (rep.graphs, rep.ops) == (e.graph_count, e.op_count) == (2, 4)
    assert breaks.compiled_graphs(model, x, {}) == (2, 4)
    # under no_grad the child's input never requires grad: no recompile, one graph
    with torch.no_grad():
        assert breaks.compiled_graphs(model, x, {}) == (1, 2)
    assert "1 graph break site(s), 2 graph(s), 4 captured op(s)" in rep.describe()
