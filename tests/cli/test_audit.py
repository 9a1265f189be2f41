"""`perflab audit`: JSON with the stable fields, an HTML page, and bad input in one line with exit 2."""

import json
from pathlib import Path

import pytest
from clirun import perflab

pytest.importorskip("transformers")

FACTORIES = Path(__file__).resolve().parents[1] / "unit" / "audit" / "factories.py"
SMALL = ["--hf-set", "n_layer=1", "n_embd=16", "n_head=2", "vocab_size=64", "n_positions=16"]


def test_json_and_html_of_a_hugging_face_config(tmp_path):
    from perflab.audit.run import JSON_FIELDS

    page = tmp_path / "audit.html"
    r = perflab("audit", "--hf-config", "gpt2", *SMALL, "--seq", "8", "--steps", "2", "--no-breaks", "--json",
                "--html", page)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert tuple(j) == JSON_FIELDS
    assert j["peak_tflops"] is None and "peak unknown" in j["mfu_basis"]
    text = page.read_text()
    assert "data:image/png;base64," in text and "Where the time goes" in text


def test_a_factory_file_in_the_terminal():
    r = perflab("audit", f"{FACTORIES}:convnet", "--steps", "2", "--no-breaks")
    assert r.returncode == 0, r.stderr
    assert "MFU" in r.stdout and "where" in r.stdout and "tokens/s n/a" in r.stdout


@pytest.mark.parametrize("args, words", [
    ([f"{FACTORIES}:raises"], "cannot open the shards"),
    ([f"{FACTORIES}:wrong_type"], "expected"),
    (["--hf-config", "not-a-model-type"], "does not know the model type"),
    (["--hf-config", "/no/such/config.json"], "no config file"),
    ([], "give TARGET"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    r = perflab("audit", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr


def test_the_real_entry_point_never_reaches_the_network():
    r = perflab("audit", "--hf-config", "gpt2", *SMALL, "--seq", "8", "--steps", "1", "--no-breaks", "--json",
                fresh=True, env={"HF_HUB_OFFLINE": "", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["flops_per_step"] > 0


def test_the_readme_factory_example_meets_the_contract(tmp_path, monkeypatch):
    """The README's example, copied as a learner would, loads and passes the contract's checks."""
    import re

    from perflab.audit.target import from_factory

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"<!-- audit-factory-example -->\n```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    (tmp_path / "mystep.py").write_text(code.replace("n_layer=2, n_embd=128, n_head=4",
                                                     "n_layer=1, n_embd=16, n_head=2, vocab_size=64"))
    t = from_factory(f"{tmp_path}/mystep.py:build")
    assert t.tokens_per_batch == 1024 and t.loss_fn is not None and t.optimizer is not None


def test_audit_and_tune_report_the_same_ceiling_for_the_same_dtype(tmp_path):
    """One MFU basis (perflab.flops.mfu.mfu_basis): once a quiet ceiling is stored for fp32 on this
    CPU, the audit and the ladder both divide by it and both name it in their JSON."""
    from perflab.core.quietness import MadeUpLoad, injected
    from perflab.flops import mfu

    env = {"PERFLAB_RESULTS": str(tmp_path)}
    with pytest.MonkeyPatch.context() as mp, injected(MadeUpLoad(0.0)):  # a real measurement on a made-up quiet machine
        mp.setenv("PERFLAB_RESULTS", str(tmp_path))
        stored = mfu.mfu_basis("cpu", "fp32")
    assert stored.stored and stored.kind == "measured ceiling"
    a = perflab("audit", "--hf-config", "gpt2", *SMALL, "--seq", "8", "--steps", "2", "--no-breaks", "--device", "cpu",
                "--json", env=env)
    assert a.returncode == 0, a.stderr
    t = perflab("tune", "--preset", "smoke", "--rungs", "baseline", "--json", env=env)
    assert t.returncode == 0, t.stderr
    audit_fp32 = json.loads(a.stdout)["mfu_bases"]["fp32"]
    tune_fp32 = json.loads(t.stdout)["rows"][0]["mfu_basis_info"]
    assert audit_fp32["tflops"] == tune_fp32["tflops"] == stored.tflops
    assert audit_fp32["when"] == tune_fp32["when"] == stored.when and stored.when in audit_fp32["label"]
