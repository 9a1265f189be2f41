"""The loss's graph breaks, with file, line and how often each ran; a loss dynamo cannot trace is a note."""

import torch

from perflab.audit.breaks import NOT_READ, graph_breaks

from . import factories as F


def test_an_item_in_the_forward_is_a_break_at_its_line():
    built = F.item_in_forward()
    model, batch = built["model"], built["batches"][0]
    breaks, note = graph_breaks(model, lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), batch)
    assert note == "" and breaks.read and breaks.sites
    b = breaks.sites[0]
    assert b.file.endswith("factories.py") and isinstance(b.line, int) and b.reason and b.hits == 1


def test_a_loss_that_cannot_be_traced_is_one_note_not_an_error():
    def loss_fn(m, b):
        raise RuntimeError("the learner's loss fails")

    breaks, note = graph_breaks(torch.nn.Linear(2, 2), loss_fn, torch.zeros(1, 2))
    assert not breaks.read and breaks.sites == [] and note.startswith(NOT_READ) and "\n" not in note
