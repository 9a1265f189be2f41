"""Fixtures shared by the plan's tests: torchtitan's published Llama 3.1 8B job, planned once a session.

Several tests read the same plans of that job (no and full recompute on 8 H100s, full recompute on 64):
`published_8b(ac, gpus)` plans each once and hands the same `Plan` to every test that asks. The tests that
read it share one xdist group (`factories.PUBLISHED_GROUP`), so that `make test`'s two workers do not plan it twice.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def published_8b():
    pytest.importorskip("transformers")
    from perflab.plan import published
    from perflab.plan.run import plan

    plans: dict[tuple[str, int], object] = {}

    def get(ac: str, gpus: int = 8):
        if (ac, gpus) not in plans:
            plans[(ac, gpus)] = plan(published.make_target, gpu="h100", gpus=gpus, fsdp=True, ac=ac, dtype="bf16",
                                     suggest=False)
        return plans[(ac, gpus)]

    return get
