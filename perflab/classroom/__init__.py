"""The teacher's room: a class's lab notebooks graded where no learner's code can reach the grade,
and the learners' copy of the course. It uses every lesson package's lab checks and
`perflab.course`'s notebook cleaning; nothing but the command line imports it.

- `gradebook`: `perflab grade`, a class's lab notebooks run in fresh kernels, one gradebook
- `judge`: the grade of one submission, from its answers run apart from the learner's kernel
- `answer_worker`: the confined process in which the judge runs a learner's answer functions
- `sandbox`: each learner's processes confined by the operating system (bubblewrap)
- `release`: `perflab release`, the course for learners: no solutions, no outputs
"""

from perflab._lazy import lazy_modules

MODULES = ("gradebook", "judge", "answer_worker", "sandbox", "release")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
