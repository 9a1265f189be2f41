"""Checks for labs/08_numa.ipynb: split one NUMA node's CPUs among the ranks whose GPUs sit on it.

The learner writes `split_node(cpus, n_ranks, siblings) -> list[list[int]]`. Several answers are
right, so the check tests the rules rather than one list, on several fake nodes (with and without
SMT, cores that do not divide evenly, CPU numbers with gaps):
1. every CPU of the node goes to exactly one rank;
2. a core's hardware threads (SMT siblings) go to the same rank;
3. ranks get whole cores as evenly as they divide (their core counts differ by at most one);
4. each rank's list names its cores' first threads before any second thread;
5. each rank's cores are neighbours: a consecutive block of the node's cores, in core order.
   A round-robin deal (rank 0 gets cores 0, 4, 8, ...) spreads every rank over the whole node;
   neighbouring cores often share a cache (the cores of one AMD EPYC core complex share its L3, for
   example), and a block is also what `taskset -c 0-12` and a reader can follow.
The learner's function may not call perflab's own split (`plan.split_node`, `plan.plan`).
The cases cover SMT siblings numbered far apart (c, c + 52) and next to each other (2c, 2c + 1),
a core count that does not divide by the ranks, and gaps in the numbering.
"""

from __future__ import annotations

from collections.abc import Callable

from perflab.grading.checks import LabCheckError, Verdict, record
from perflab.numa import plan as _plan
from perflab.numa.plan import core_groups

CASES = [
    # (name, cpus, n_ranks, siblings)
    ("4 cores, no SMT, 2 ranks", [0, 1, 2, 3], 2, {}),
    ("node 0 of a 2-socket server (52 cores × 2 threads, siblings c and c + 104), 4 ranks", list(range(0, 52)) + list(range(104, 156)), 4,
     {c: [c, c + 104] for c in range(52)} | {c + 104: [c, c + 104] for c in range(52)}),
    ("6 cores × 2 threads, 4 ranks (uneven)", list(range(6)) + list(range(6, 12)), 4,
     {c: [c, c + 6] for c in range(6)} | {c + 6: [c, c + 6] for c in range(6)}),
    ("gaps in the numbering (offline CPUs), 3 ranks", [0, 2, 3, 5, 7, 8, 9], 3, {}),
    ("siblings listed next to each other, 2 ranks", list(range(8)), 2, {c: [c - c % 2, c - c % 2 + 1] for c in range(8)}),
]


def rule_problems(split, cpus, n_ranks, siblings) -> list[str]:
    """What is wrong with `split` for this node, one line per broken rule (empty: right)."""
    if not isinstance(split, (list, tuple)) or len(split) != n_ranks:
        return [f"expected a list of {n_ranks} lists (one per rank), got {split!r}"[:300]]
    out = []
    flat = [c for part in split for c in part]
    if sorted(flat) != sorted(cpus):
        missing, extra = sorted(set(cpus) - set(flat)), sorted(set(flat) - set(cpus))
        dup = sorted({c for c in flat if flat.count(c) > 1})
        out.append(f"rule 1: every CPU exactly once (missing {missing[:8]}, not on this node {extra[:8]}, twice {dup[:8]})")
    owner = {c: r for r, part in enumerate(split) for c in part}
    groups = core_groups(cpus, siblings)
    split_cores = [g for g in groups if len({owner.get(c) for c in g}) > 1]
    if split_cores:
        out.append(f"rule 2: a core's threads stay together; core {split_cores[0]} is split between ranks")
    counts = [len({tuple(g) for g in groups if owner.get(g[0]) == r}) for r in range(n_ranks)]
    if len(groups) >= n_ranks and max(counts) - min(counts) > 1:
        out.append(f"rule 3: cores per rank should differ by at most one; got {counts}")
    firsts = {g[0] for g in groups}
    for r, part in enumerate(split):
        kinds = [c in firsts for c in part]
        if kinds and kinds != sorted(kinds, reverse=True):
            out.append(f"rule 4: rank {r}'s list {list(part)[:6]}... puts a second thread before a first one")
            break
    order = {g[0]: i for i, g in enumerate(groups)}
    for r in range(n_ranks):
        idx = sorted(order[g[0]] for g in groups if owner.get(g[0]) == r)
        if idx and idx != list(range(idx[0], idx[0] + len(idx))):
            out.append(f"rule 5: rank {r}'s cores are not neighbours (core numbers {[groups[i][0] for i in idx][:6]}...): "
                       "give each rank a consecutive block of cores, not a round-robin deal")
            break
    return out


def check_split_node(student: Callable) -> Verdict:
    from perflab.grading.guard import refuse_perflab
    from perflab.numa import plan

    checked = False
    for name, cpus, n, sib in CASES:
        try:
            got = student(list(cpus), n, dict(sib))
        except NotImplementedError:
            print("… split_node: not done yet — fill in the function and run this cell again.")
            return record("split_node", False)
        if not checked:
            refuse_perflab("split_node", student, [plan.split_node, plan.plan])
            checked = True
        problems = rule_problems(got, cpus, n, sib)
        if problems:
            raise LabCheckError(f"split_node, case '{name}': " + "; ".join(problems))
    print(f"✓ split_node: every rule holds on {len(CASES)} nodes")
    return record("split_node", True)


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_split_node(cpus, n_ranks, siblings) -> list[list[int]]:
    from perflab.numa import plan

    return plan.split_node(cpus, n_ranks, siblings)


LEARNER_ANSWERS = ("split_node",)
REFERENCES = {"split_node": reference_split_node}
HELPERS = ("rule_problems",)


FORBIDDEN = (_plan.split_node, _plan.plan)


def grading_nodes(rng) -> list[tuple[str, list[int], int, dict]]:
    """Nodes drawn per learner: SMT or not, siblings far apart or adjacent, gaps, uneven splits."""
    out = []
    for k in range(4):
        cores = rng.randint(2, 40)
        ranks = rng.randint(1, min(8, cores))
        smt = rng.choice(["none", "far", "adjacent"])
        first = rng.choice([0, 0, 2, 16])
        if smt == "none":
            cpus = sorted(rng.sample(range(first, first + 2 * cores), cores))
            sib: dict = {}
        elif smt == "far":
            cpus = list(range(first, first + cores)) + list(range(first + 100, first + 100 + cores))
            sib = {c: [c, c + 100] for c in range(first, first + cores)} | {
                c + 100: [c, c + 100] for c in range(first, first + cores)}
        else:
            cpus = list(range(first, first + 2 * cores))
            sib = {c: [c - (c - first) % 2, c - (c - first) % 2 + 1] for c in cpus}
        out.append((f"grading node {k + 1}: {cores} cores, SMT {smt}, {ranks} ranks", cpus, ranks, sib))
    return out


def judge(answers, rng) -> None:
    from perflab.grading.checks import NOT_DONE, attempt, record

    if not check_split_node(answers["split_node"]):
        return
    name = "split_node on the grading nodes"
    for what, cpus, n, sib in grading_nodes(rng):
        got = attempt(name, answers["split_node"], what=what, cpus=list(cpus), n_ranks=n, siblings=dict(sib))
        if got is NOT_DONE:
            record(name, False)
            return
        problems = rule_problems(got, cpus, n, sib)
        if problems:
            raise LabCheckError(f"{name}, {what}: " + "; ".join(problems))
    record(name, True)
