"""One vocabulary for what a measurement lets perflab say, used by every module that says it.

* A measurement's machine (`perflab.core.quietness`): **quiet**, **disturbed** (other programs used
  the device meanwhile; the cause says how much) or **unknown**.
* Two medians compared (`perflab.core.stats.compare_medians`): they **agree** within their noise,
  **differ** beyond it, or the comparison is **inconclusive**.
* A sweep's winner against its baseline (`perflab.core.sweepnoise.decide`), and a ladder's rung
  (`perflab.tune.verdict`): **choose** it (beyond the noise), **within the noise**, or
  **inconclusive** (the machine was busy).

A conclusion is never drawn from a disturbed measurement: the sentence is `busy_text(cause)`.
"""

from __future__ import annotations

QUIET, DISTURBED, UNKNOWN = "quiet", "disturbed", "unknown"
QUIETNESS = (QUIET, DISTURBED, UNKNOWN)
AGREE, DIFFER, INCONCLUSIVE = "agree", "differ", "inconclusive"
CHOOSE, WITHIN_NOISE = "choose", "within the noise"


def busy_text(cause: str) -> str:
    """The one sentence for a conclusion a busy machine withholds: 'inconclusive: the machine was busy (…)'."""
    return f"{INCONCLUSIVE}: the machine was busy ({cause or 'quietness not measured'})"
