"""The teacher's room: a class's lab notebooks graded where no learner's code can reach the grade,
and the learners' copy of the course. It uses every lesson package's lab checks and
`perflab.course`'s notebook cleaning; nothing but the command line imports it.

- `gradebook`: `perflab grade`, a class's lab notebooks run in fresh kernels, one gradebook
- `submissions`: the course's labs and the class's submissions, read before any learner's code runs
- `runner`: one submission run in a fresh, confined kernel, then the judge's verdict
- `evidence`: what the grader reads back from a learner's run (it can only lower a grade)
- `judge`: the grade of one submission, from its answers run apart from the learner's kernel
- `answer_source`: what a submitted notebook's source defines, read without running it
- `answers`: the learner's answers as a lab's judge sees them (proxies into the worker)
- `worker`: the judge's side of the confined answer worker
- `answer_worker`: the confined process in which the judge runs a learner's answer functions
- `ranks`: a learner's function on ranks that talk only through the judge, which counts and compares
- `rank_worker`: one such rank, in a sandbox of its own without perflab
- `sandbox`: each learner's processes confined by the operating system (bubblewrap): only what the
  code needs in view, an environment from an allowlist
- `cgroup`: one control group per learner: memory with children and tmpfs, processes, CPU
- `seccomp`: the system calls a learner's processes may not make (keyrings; new processes in a worker)
- `boxes`: a learner's folder (a sized tmpfs), read bounded, removed without recursion
- `shown`: what a learner wrote as the teacher sees it: no terminal escapes, invisible characters escaped
- `release`: `perflab release`, the course for learners: no solutions, no outputs
"""

from perflab._lazy import lazy_modules

MODULES = ("gradebook", "submissions", "runner", "evidence", "judge", "answer_source", "answers", "worker",
           "answer_worker", "ranks", "rank_worker", "sandbox", "cgroup", "seccomp", "boxes", "shown", "release")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
