"""The labs' tutor: what every lab check uses, in the learner's own notebook. The lesson packages'
`labNN` modules build their checks on it; the teacher's grade comes from `perflab.classroom`.

- `checks`: a check raises on a wrong answer with a hint, says "not done yet" for a stub, and sums up
- `guard`: refuse a lab answer that calls perflab's own solution; name a known mistake
"""

from perflab._lazy import lazy_modules

MODULES = ("checks", "guard")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
