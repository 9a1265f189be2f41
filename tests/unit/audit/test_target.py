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
