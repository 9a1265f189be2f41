"""Tests of `perflab.profiling.nsight`."""

import pytest


def test_nsight_commands_are_generated_and_never_required():
    from perflab.core.errors import UnsupportedError
    from perflab.profiling import nsight

    c = nsight.commands("tiny-gpt", fault="sync", steps=3, out="x")
    assert c["nsys"].startswith("nsys profile") and "-m perflab profile --preset tiny-gpt --fault sync" in c["nsys"]
    assert c["ncu"].startswith("ncu ")
    if not nsight.available()["nsys"]:
        with pytest.raises(UnsupportedError, match="not installed"):
            nsight.run(c["nsys"])


def test_the_lessons_nsight_cell_says_why_it_did_not_run():
    from perflab.profiling import nsight

    text = nsight.show("tiny-gpt", "sync", 3, "/tmp/step", on_gpu=False, smoke=True)
    assert text.startswith("nsys:\n  nsys profile") and text.endswith("not run here: no GPU")
