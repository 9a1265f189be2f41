"""Lazy submodule access for perflab's packages: `perflab.core.timing` works after `import perflab`
without importing torch (or anything else) until a module is first used."""

from __future__ import annotations

from importlib import import_module


def lazy_modules(package: str, modules: tuple[str, ...]):
    """`__getattr__` and `__dir__` for a package whose submodules load on first access."""

    def __getattr__(name: str):
        if name in modules:
            return import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(modules)

    return __getattr__, __dir__
