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
    from perflab.tune.waterfall import CATEGORIES

    page = tmp_path / "audit.html"
    r = perflab("audit", "--hf-config", "gpt2", *SMALL, "--seq", "8", "--steps", "2", "--no-breaks", "--json",
                "--html", str(page), "--gpu", "h100-sxm")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert tuple(j) == JSON_FIELDS
    fp8 = j["fp8_gemms"]  # the step's GEMMs on the GPU named: a CPU has no fp8 units
    assert fp8["basis"]["gpu_id"] == "h100-sxm" and "audit ran on a CPU, which has no fp8 units" in fp8["note"]
    assert fp8["gemms"] and not any(g["fp8_wins"] for g in fp8["gemms"])  # a 16-wide model: nothing pays
    assert set(j["breakdown_s"]) == set(CATEGORIES)  # lesson 11's waterfall names: launch_overhead
    assert "[audit] first step" in r.stderr  # progress is not hidden by --json: it goes to stderr
    assert j["peak_tflops"] is None and "peak unknown" in j["mfu_basis"]
    text = page.read_text()
    assert "data:image/png;base64," in text and "Where the time goes" in text
    assert "causal attention halved" in text and "causal attention dense" in text
    assert "Where fp8 would pay" in text and "keep bf16" in text


def test_a_factory_file_in_the_terminal():
    r = perflab("audit", f"{FACTORIES}:convnet", "--steps", "2", "--no-breaks")
    assert r.returncode == 0, r.stderr
    assert "MFU" in r.stdout and "where" in r.stdout and "tokens/s n/a" in r.stdout
    assert "fp8      no prediction: the audit ran on a CPU, which has no fp8 units; name a GPU" in r.stdout


@pytest.mark.parametrize("args, words", [
    ([f"{FACTORIES}:raises"], "cannot open the shards"),
    ([f"{FACTORIES}:wrong_type"], "expected"),
    (["--hf-config", "not-a-model-type"], "does not know the model type"),
    (["--hf-config", "/no/such/config.json"], "no config file"),
    (["--hf-config", "gpt2", "--hf-set", "n_layer=abc"], "Field 'n_layer' expected int, got str"),
    ([f"{FACTORIES}:never_returns", "--factory-timeout", "1"], "did not return within 1 s"),
    ([], "give TARGET"),
    (["--hf-config", "gpt2", "--gpu", "z80"], "--gpu 'z80' is not in perflab's hardware table: use one of"),
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
    found = re.search(r"<!-- audit-factory-example -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's factory example is gone"
    code = found.group(1)
    assert len(code.strip().splitlines()) <= 20
    (tmp_path / "mystep.py").write_text(code.replace("n_layer=2, n_embd=128, n_head=4",
                                                     "n_layer=1, n_embd=16, n_head=2, vocab_size=64"))
    t = from_factory(f"{tmp_path}/mystep.py:build")
    assert t.tokens_per_batch == 1024 and t.loss_fn is not None and t.optimizer is not None


# ------------------------------------------------------------------------------- audit --trace DIR
PUBLIC_TRACES = Path(__file__).resolve().parents[1] / "corpus" / "traces" / "public"


def test_trace_folder_of_a_real_job_as_json_and_table():
    r = perflab("audit", "--trace", str(PUBLIC_TRACES / "hta_sampled_job"), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["world_size"] == 128 and [x["rank"] for x in j["ranks"]] == [0, 1] and j["steps"] == [551, 552]
    assert all(abs(sum(x["shares"].values()) - 1) < 1e-9 for x in j["ranks"])
    r = perflab("audit", "--trace", str(PUBLIC_TRACES / "hta_sampled_job"))
    assert r.returncode == 0, r.stderr
    assert "idle %" in r.stdout and "exposed comm" in r.stdout and "Stragglers" in r.stdout


def test_trace_mfu_from_a_config_at_the_peak_the_trace_names(tmp_path):
    import gzip

    from perflab.audit.target import from_hf_config
    from perflab.audit.trace import model_flops_per_token
    from perflab.core.hardware import by_id

    src = PUBLIC_TRACES / "mi250_minitoy" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    raw = json.loads(gzip.decompress(src.read_bytes()))
    raw["deviceProperties"] = [{**p, "name": "NVIDIA H100 80GB HBM3"} for p in raw["deviceProperties"]]
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.json").write_text(json.dumps(raw))
    model = ["--hf-config", "gpt2", *SMALL, "--seq", "8"]
    r = perflab("audit", *model, "--trace", str(tmp_path / "job"), "--tokens-per-step", "4096", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)["mfu"]
    per_token, _ = model_flops_per_token(from_hf_config("gpt2", {"n_layer": 1, "n_embd": 16, "n_head": 2,
                                                                 "vocab_size": 64, "n_positions": 16}, batch=2, seq=8))
    assert m["flops_per_step"] == pytest.approx(per_token * 4096)
    assert m["peak_tflops"] == by_id("h100-sxm").peak("bf16") and m["gpus"] == 1
    assert m["mfu"] == pytest.approx(m["flops_per_step"] / (m["step_s"] * m["peak_tflops"] * 1e12))


@pytest.mark.parametrize("args, words", [
    (["--trace", "EMPTY"], "no trace in folder"),
    (["--trace", "/no/such/folder"], "not found"),
    (["--trace", str(PUBLIC_TRACES / "hta_sampled_job"), "--tokens-per-step", "8"], "--tokens-per-step goes with"),
    (["--hf-config", "gpt2", "--trace", str(PUBLIC_TRACES / "hta_sampled_job")], "needs --tokens-per-step"),
    (["--trace", "MIXED"], "different jobs"),
    (["--trace", str(PUBLIC_TRACES / "hta_sampled_job"), "--try"], "not with --trace"),
    (["--trace", str(PUBLIC_TRACES / "hta_sampled_job"), "--gpu", "h100-sxm"], "--gpu goes with a step run here"),
])
def test_trace_bad_input_is_one_line(tmp_path, args, words):
    import gzip
    import shutil

    (tmp_path / "empty").mkdir()
    mixed = tmp_path / "mixed"  # two ranks of one job, and a third from another run (the MI250 toy as rank 2)
    shutil.copytree(PUBLIC_TRACES / "hta_sampled_job", mixed)
    other = json.loads(gzip.decompress((PUBLIC_TRACES / "mi250_minitoy" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
                                       .read_bytes()))
    (mixed / "x.json").write_text(json.dumps({**other, "distributedInfo": {"rank": 2, "world_size": 128}}))
    named = {"EMPTY": str(tmp_path / "empty"), "MIXED": str(mixed)}
    args = [named[a] if a in named else a for a in args]
    r = perflab("audit", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_the_factory_timeout_default_is_the_libraries():
    from perflab.audit.target import FACTORY_TIMEOUT_S
    from perflab.commands import audit

    assert audit.FACTORY_TIMEOUT_S == FACTORY_TIMEOUT_S
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"`--factory-timeout` seconds (default {FACTORY_TIMEOUT_S:g};" in readme


def test_audit_and_tune_report_the_same_ceiling_for_the_same_dtype(tmp_path):
    """One MFU basis (perflab.flops.mfu.mfu_basis): once a quiet ceiling is stored for fp32 on this
    CPU, the audit and the ladder both divide by it and both name it in their JSON."""
    from perflab.core import hardware
    from perflab.core.quietness import MadeUpLoad, injected
    from perflab.flops import mfu

    env = {"PERFLAB_RESULTS": str(tmp_path)}
    with pytest.MonkeyPatch.context() as mp, injected(MadeUpLoad(0.0)):  # a real measurement on a made-up quiet machine
        mp.setenv("PERFLAB_RESULTS", str(tmp_path))
        # whether the timed figure lies below this CPU's estimated peak (read from a clock that may be
        # below boost) is tested in tests/unit/flops/test_mfu.py; here it is stored whatever it is
        mp.setattr(hardware, "ceiling_problem", lambda *a: None)
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
