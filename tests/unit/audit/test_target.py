"""Bad input to `perflab audit`: one line that says what to change, never a traceback."""

import pytest

pytest.importorskip("transformers")

from perflab.audit.run import run_audit  # noqa: E402
from perflab.audit.target import AuditInputError, from_factory, from_hf_config  # noqa: E402
from perflab.core.errors import InputError  # noqa: E402

HERE = __file__.rsplit("/", 1)[0]


def fac(name):
    return f"{HERE}/factories.py:{name}"


def one_line(fn):
    with pytest.raises(InputError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_factory_that_raises_names_its_file_line_and_message():
    msg = one_line(lambda: from_factory(fac("raises")))
    assert "cannot open the shards" in msg and "factories.py:" in msg


def test_a_wrong_return_says_what_was_expected():
    msg = one_line(lambda: from_factory(fac("wrong_type")))
    assert "expected" in msg and "'model'" in msg and "'batches'" in msg


@pytest.mark.parametrize("name, words", [
    ("forward_fails", ("forward", "factories.py")),
    ("empty", ("no batch",)),
    ("exhausted", ("no batch",)),
    ("vector_loss", ("not a scalar",)),
    ("out_of_memory", ("out of memory", "smaller batch")),
])
def test_bad_steps_are_one_line(name, words):
    msg = one_line(lambda: run_audit(from_factory(fac(name)), device="cpu", steps=1, explain_breaks=False))
    for w in words:
        assert w in msg


def test_unknown_model_type_and_missing_config_path():
    assert "does not know the model type" in one_line(lambda: from_hf_config("gpt-nonexistent"))
    assert "no config file" in one_line(lambda: from_hf_config("./nowhere/config.json"))


def test_a_local_config_json_with_overrides(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2,
                                                      "vocab_size": 50, "n_positions": 16}))
    t = from_hf_config(str(tmp_path), {"n_layer": 2}, batch=1, seq=8)
    assert t.model.config.n_layer == 2 and t.tokens_per_batch == 8


def test_overrides_parse_json_values():
    from perflab.audit.target import parse_overrides

    assert parse_overrides(["n_layer=4", "tie_word_embeddings=False", "act=gelu"]) == {
        "n_layer": 4, "tie_word_embeddings": False, "act": "gelu"}
    with pytest.raises(AuditInputError):
        parse_overrides(["n_layer"])


@pytest.mark.parametrize("name, words", [
    ("nan_loss", ("the loss is nan", "does not train")),
    ("one_shot", ("one-shot generator", "ran out after 3 batch(es)", "iterated again")),
])
def test_a_nan_loss_and_a_short_one_shot_generator_are_one_line(name, words):
    msg = one_line(lambda: run_audit(from_factory(fac(name)), device="cpu", steps=2, explain_breaks=False))
    for w in words:
        assert w in msg


def test_an_endless_generator_is_drawn_from_never_replayed():
    from perflab.audit.target import BatchSource

    src = BatchSource(from_factory(fac("endless")).batches, need=10)
    first = [src.next() for _ in range(10)]
    assert len({id(b[0]) for b in first}) == 10 and src.given == 10


def test_a_factory_that_does_not_return_is_one_line_within_its_limit():
    import threading

    from perflab.audit.target import call_within

    release = threading.Event()
    heard: list[str] = []
    try:
        msg = one_line(lambda: call_within(release.wait, "the factory f.py:build", 0.3, heard.append, every_s=0.1))
    finally:
        release.set()  # the worker thread ends
    assert "did not return within 0.3 s" in msg and "--factory-timeout" in msg
    assert heard and all("still running after" in h and "gives up at 0.3 s" in h for h in heard)
    assert call_within(lambda: 7, "f", 5.0) == 7
    with pytest.raises(ZeroDivisionError):
        call_within(lambda: 1 / 0, "f", 5.0)


def test_a_bad_config_override_is_one_whole_line():
    msg = one_line(lambda: from_hf_config("gpt2", {"n_layer": "abc"}))
    assert "n_layer" in msg and "expected int" in msg
