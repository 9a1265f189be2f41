"""Tests of `perflab.grading.guard`."""

from __future__ import annotations

from perflab.core.validate import positive_number
from perflab.grading import guard as labguard


def _uses_a_global(x):
    return positive_number("x", x)


def test_labguard_finds_a_perflab_function_reached_as_a_global_and_skips_deleted_cells():
    assert labguard.uses_perflab(_uses_a_global, [positive_number]) == ["positive_number"]

    def make():
        kept = positive_number

        def inner():
            return kept

        return inner

    inner = make()
    assert labguard.uses_perflab(inner, [positive_number]) == ["positive_number"]
    (cell,) = inner.__closure__ or ()
    del cell.cell_contents  # the closure's cell is empty when the guard looks
    assert labguard.uses_perflab(inner, [positive_number]) == []


def test_labguard_finds_perflab_answers_however_a_learner_reaches_them():
    from perflab.grading import guard as labguard
    from perflab.numa import plan

    class Mine(plan.RankPlan):  # a learner's class deriving from a perflab answer
        pass

    class Wrapped:
        split = staticmethod(plan.split_node)  # perflab's function kept as a staticmethod

    assert labguard.uses_perflab(Mine, [plan.RankPlan]) == ["RankPlan"]
    assert labguard.uses_perflab(Wrapped, [plan.split_node]) == ["split_node"]
    assert labguard.uses_perflab(plan.split_node, [plan.split_node]) == ["split_node"]  # perflab's own function

    def make():
        late = None  # an empty closure cell at definition time is skipped, not an error

        def inner():
            return late

        late = 1
        return inner

    assert labguard.uses_perflab(make(), [plan.split_node]) == []
    assert labguard.close("a", "a", 1e-9, 0) and not labguard.close("a", "b", 1e-9, 0)


def test_name_mistake_skips_a_mistake_formula_that_raises():
    from perflab.grading import guard as labguard

    def raises(x):
        raise ZeroDivisionError

    found = labguard.name_mistake([({"x": 2}, 4)], [("broken", raises, "never"), ("doubled", lambda x: 2 * x, "halve it")],
                                  rtol=1e-9, atol=0)
    assert found is not None and found[0] == "doubled"
