"""`perflab audit`: the learner's own training step, measured by every lesson's instrument.

    >>> from perflab.audit import from_factory, from_hf_config, run_audit
    >>> rep = run_audit(from_factory("mystep.py:build"))      # or from_hf_config("gpt2", {"n_layer": 2})
    >>> rep.json                                              # the stable fields (perflab.audit.run.JSON_FIELDS)
    >>> print(rep.summary())

This topic uses the formulas and measurements of the others (the FLOP counter and MFU of lessons
01-02, the memory estimate of 03, the matmul ceiling of 04, the trace reading of 09, the graph-break
report of 10, the ladder of 11) and none of their widgets.
"""

from perflab.audit.run import JSON_FIELDS, AuditReport, run_audit
from perflab.audit.target import AuditInputError, Target, from_factory, from_hf_config, target_from

__all__ = ["JSON_FIELDS", "AuditInputError", "AuditReport", "Target", "from_factory", "from_hf_config", "run_audit",
           "target_from"]
