"""Helpers the tests of this folder share."""

from pathlib import Path

from hypothesis import HealthCheck, settings  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


TRACES = CORPUS / "traces"


SETTINGS = settings(max_examples=60, deadline=None, database=None,  # no .hypothesis folder in the checkout
                    suppress_health_check=[HealthCheck.too_slow])
