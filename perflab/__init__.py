"""perflab: measure what your hardware really does for neural-network training.

Importing perflab has no side effects: it sets no seeds, threads or global flags, and imports
torch only where a function needs it. Start with:

    >>> import perflab
    >>> dev = perflab.device.pick_device()
    >>> print(perflab.device.describe(dev))

Modules are named after the concept they hold: `device`, `hardware`, `timing`, `results`,
`measure`, `flops`, `roofline`, `plots`, `widgets`, `grading`.
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

_SUBMODULES = {
    "attention",
    "busbw",
    "collectives",
    "ddp",
    "device",
    "dist",
    "dtypes",
    "errors",
    "flopcounter",
    "flops",
    "gpumem",
    "grading",
    "hardware",
    "mamf",
    "measure",
    "memory",
    "memplots",
    "memprobe",
    "mfu",
    "mfu_plots",
    "models",
    "nbclean",
    "notebook",
    "overlap",
    "plots",
    "reference",
    "results",
    "roofline",
    "shapeplots",
    "shapes",
    "swiglu",
    "timing",
    "train",
    "transformer_flops",
    "validate",
    "widgets",
}


def __getattr__(name: str):
    # Lazy submodule access (perflab.timing, ...) without importing torch at `import perflab`.
    if name in _SUBMODULES:
        return _import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'perflab' has no attribute {name!r}")
