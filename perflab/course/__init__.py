"""What only the notebooks need: the lesson's first cell, widgets, shared plots, reference data,
notebook cleaning. It may use every topic package; nothing below imports it.

- `notebook`: say where a lesson measures, and size it for smoke or full runs
- `widgets`: thin sliders wired to pure functions, errors shown as one line
- `plots`: figures the lessons share (bars against peaks, bandwidth curves, the roofline)
- `reference`: reference data recorded on real GPUs (`data/`), with provenance
- `nbclean`: strip outputs and execution counts (what git holds)
- `report`: `perflab report`, this machine measured the way the lessons measure it, and two reports compared
- `report_parts`: the report's parts, each measured by its lesson's function, with its figures
- `report_types`: what a report is made of (figures, parts, the report, a comparison), JSON only at the edge
- `report_html`: a report as one standalone HTML page, its figures embedded
- `audit_html`: `perflab audit --html`, an audit as one such page, with its waterfall and roofline figures
- `predict`: the learner's prediction written down before a measurement, compared and summarised
- `gpu_figures`: published GPU figures with their source, shown beside (never mixed with) a measurement
"""

from perflab._lazy import lazy_modules

MODULES = ("notebook", "widgets", "plots", "reference", "nbclean", "report", "report_parts", "report_types", "report_html",
           "audit_html", "predict", "gpu_figures")
__getattr__, __dir__ = lazy_modules(__name__, MODULES)
