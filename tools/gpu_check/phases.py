"""The check's six phases (install, machine, gpu_tests, instruments, reference, notebooks), each a
method of GpuCheck that returns its record: status, reason, items and figures. Standard library only."""

from __future__ import annotations

import fnmatch
import json
import platform
import re
import shutil
from pathlib import Path
from typing import Any

from gpu_check.probes import PROBES
from gpu_check.records import notebook_error, read_json, read_reports, verdict, within
from gpu_check.runner import HERE, ROOT, Check
from gpu_check.wheels import unpack_wheel, wheel_fits

NOTEBOOK_MODULES = ("papermill", "nbclient", "nbformat", "jupyter_client", "ipykernel", "ipywidgets", "ipyexperiments")
REHEARSAL_NOTEBOOKS = ("notebooks/01_*", "labs/solutions/07_*")  # the shortest lesson and solution at smoke


class GpuCheck(Check):
    """The check with its phases: `main` runs each of PHASES by its method of that name."""

    def import_check(self, name: str) -> dict[str, str]:
        """Which notebook modules fail to import with the check's PYTHONPATH: {module: error}."""
        code = ("import importlib, json, sys\nbad = {}\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n"
                "    except Exception as e:\n        bad[m] = f'{type(e).__name__}: {e}'[:300]\nprint(json.dumps(bad))")
        res = self.work / "machine" / f"{name}.json"
        r = self.run(name, self.py("-c", code, *NOTEBOOK_MODULES), 90, stdout=res)
        try:
            return read_json(res)
        except (OSError, ValueError):
            return {"(import check)": self.failure(r, "the import check")}

    def install(self) -> dict[str, Any]:
        wheels = sorted(Path(self.args.wheels).glob("*.whl"))
        torch_like = [w for w in wheels if re.match(r"(torch|nvidia_cu|nvidia-cu|triton)[-_]", w.name)]
        wheels = [w for w in wheels if w not in torch_like]  # never touch the box's torch stack
        items: list[dict[str, Any]] = []
        if torch_like:
            items.append({"name": "torch wheels", "status": "skipped",
                          "reason": f"left out, the box keeps its own: {', '.join(w.name for w in torch_like)}"})
        foreign = [w.name for w in wheels if not wheel_fits(w.name, self.version)]
        reason = f"no wheels in {self.args.wheels} (make gpu-wheels makes them)"
        if foreign:  # half a set would shadow working packages with ones that cannot load: none is installed
            reason = (f"{len(foreign)} of the {len(wheels)} wheels in {self.args.wheels} are not for this Python "
                      f"({self.version[0]}.{self.version[1]} on {platform.machine()}), e.g. {foreign[0]}: none installed "
                      f"(make gpu-wheels PY={self.version[0]}.{self.version[1]} makes the right ones)")
            wheels = []
        if not wheels:
            bad = self.import_check("import-check")
            if bad:
                items.append({"name": "wheels", "status": "failed", "reason": reason + "; the notebooks cannot run: "
                              + "; ".join(f"{m}: {e}" for m, e in bad.items())})
            else:
                items.append({"name": "wheels", "status": "skipped",
                              "reason": reason + "; this Python already imports " + ", ".join(NOTEBOOK_MODULES)})
            status, why = verdict(items)
            return {"status": status, "reason": why, "items": items, "figures": {"wheels": 0}}
        r = self.run("install", self.py("-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps",
                                        "--no-compile", "--quiet", "--target", str(self.site), *map(str, wheels)),
                     120)
        how = "pip install --no-index --no-deps --target"
        if r["rc"] != 0:
            how = f"unpacked directly ({self.failure(r, 'pip')})"
            for w in wheels:
                unpack_wheel(w, self.site)
        items.append({"name": "wheels", "status": "passed", "reason": f"{len(wheels)} wheels into {self.site}: {how}"})
        bad = self.import_check("import-check")
        for m in NOTEBOOK_MODULES:
            items.append({"name": m, "status": "failed", "reason": bad[m]} if m in bad else {"name": m, "status": "passed"})
        if "(import check)" in bad:
            items.append({"name": "import check", "status": "failed", "reason": bad["(import check)"]})
        status, why = verdict(items)
        return {"status": status, "reason": why, "items": items, "figures": {"wheels": len(wheels)}}

    def machine(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        figures: dict[str, Any] = {}
        smi = shutil.which("nvidia-smi")
        if smi:
            r = self.run("nvidia-smi", [smi], 30)
            items.append({"name": "nvidia-smi", "status": "passed" if r["rc"] == 0 else "failed",
                          **({} if r["rc"] == 0 else {"reason": self.failure(r, "nvidia-smi")})})
            q = self.work / "machine" / "nvidia-smi-query.csv"
            r = self.run("nvidia-smi-query", [smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                                              "--format=csv,noheader"], 30, stdout=q)
            if r["rc"] == 0 and q.exists() and q.read_text().strip():
                first = [f.strip() for f in q.read_text().strip().splitlines()[0].split(",")]
                figures.update(dict(zip(("gpu", "driver", "memory_total", "max_sm_clock", "power_limit"), first)))
            self.run("nvidia-smi-topo", [smi, "topo", "-m"], 30)
        else:
            items.append({"name": "nvidia-smi", "status": "skipped", "reason": "no nvidia-smi on PATH (no NVIDIA driver here)"})
        code = ("import json, platform, sys\nout = {'python': platform.python_version(), 'platform': platform.platform()}\n"
                "import torch\nout.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),"
                " device_count=torch.cuda.device_count())\n"
                "if torch.cuda.is_available():\n    p = torch.cuda.get_device_properties(0)\n"
                "    out.update(device=p.name, capability=f'{p.major}.{p.minor}', sm_count=p.multi_processor_count,"
                " memory_bytes=p.total_memory)\n"
                "for m in ('triton', 'numpy', 'pandas', 'matplotlib', 'transformers', 'papermill', 'ipykernel'):\n"
                "    try:\n        out[m] = __import__(m).__version__\n    except Exception as e:\n"
                "        out[m] = None\nprint(json.dumps(out))")
        vfile = self.work / "machine" / "versions.json"
        r = self.run("versions", self.py("-c", code), 120, stdout=vfile)
        try:
            versions = read_json(vfile)
            figures.update(versions)
            self.cuda = bool(versions.get("cuda_available"))
            items.append({"name": "versions", "status": "passed"})
        except (OSError, ValueError):
            items.append({"name": "versions", "status": "failed", "reason": self.failure(r, "the version probe")})
        efile = self.work / "machine" / "perflab-env.json"
        r = self.run("perflab-env", self.py("-m", "perflab", "env", "--json"), 120, stdout=efile)
        try:
            env = read_json(efile)
            figures["perflab_device"] = env.get("device", {}).get("name")
            figures["peak_tflops"] = env.get("peak_tflops")
            figures["peak_source"] = env.get("peak_source")
            items.append({"name": "perflab env --json", "status": "passed"})
        except (OSError, ValueError):
            items.append({"name": "perflab env --json", "status": "failed", "reason": self.failure(r, "perflab env")})
        self.summary.update({k: figures.get(k) for k in ("device", "torch", "cuda", "driver", "triton")})
        status, why = verdict(items)
        return {"status": status, "reason": why, "items": items, "figures": figures}

    def gpu_tests(self) -> dict[str, Any]:
        files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                       if re.search(r"mark\.gpu\b", p.read_text(errors="replace")))
        if not files:
            return {"status": "skipped", "reason": "no test file marks a test `gpu`", "items": []}
        base = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "-p", "gpu_check.plugin",
                "-q", "-rA"]
        limit = self.args.test_limit
        reports = self.work / "logs" / "gpu-tests.jsonl"
        env = self.env((str(ROOT / "tools"),))
        env.update({"GPU_CHECK_REPORTS": str(reports), "GPU_CHECK_TEST_LIMIT": str(limit)})
        # the first run collects (the plugin writes what it collected) and runs them one after another; a
        # test past its limit (or one that kills the process) ends it, and the next run goes on with the rest
        ids: list[str] = []
        results: dict[str, dict[str, Any]] = {}
        todo: list[str] | None = None
        attempt = 0
        while self.left() > self.min_start:
            attempt += 1
            args = ["-m", "gpu", *files] if todo is None else todo
            r = self.run(f"gpu-tests-{attempt}", self.py(*base, *args), limit * len(ids or range(40)) + 60, env=env)
            recs = read_reports(reports)
            ids = ids or next((rec["collected"] for rec in recs if "collected" in rec), [])
            if not ids:
                return {"status": "failed", "items": [], "reason": "no test collected with -m gpu"
                        if r["rc"] in (0, 5) else self.failure(r, "collecting the gpu tests")}
            results.update({rec["nodeid"]: rec for rec in recs if "nodeid" in rec})
            started = [rec["started"] for rec in recs if "started" in rec]
            if started and started[-1] not in results and r["rc"] not in (0, 1):
                results[started[-1]] = {"nodeid": started[-1], "outcome": "failed",
                                        "reason": "the process ended during this test: " + self.failure(r, "pytest")}
            before, todo = todo, [t for t in ids if t not in results]
            if not todo:
                break
            if before is not None and todo == before:  # no progress: starting it again would not help
                results.update({t: {"nodeid": t, "outcome": "failed", "reason": self.failure(r, "pytest")} for t in todo})
                break
        items = []
        for t in ids:
            rec = results.get(t)
            if rec is None:
                items.append({"name": t, "status": "not run", "reason": "the phase's time was spent before it started"})
                continue
            outcome = rec["outcome"]
            status = {"passed": "passed", "skipped": "skipped"}.get(outcome, "failed")
            item = {"name": t, "status": status, "seconds": rec.get("seconds")}
            if outcome == "timeout":
                item["reason"] = f"ran past its {limit:.0f} s limit and was ended (stacks: logs/gpu-tests.jsonl.stacks)"
            elif status != "passed":
                item["reason"] = rec.get("reason") or outcome
            items.append(item)
        status, why = verdict(items)
        if status == "skipped" and all(i["status"] == "skipped" for i in items):
            reasons = sorted({i.get("reason", "") for i in items})
            why = f"{len(items)} tests marked gpu collected, each skipped: " + " | ".join(reasons)[:600]
        counts = {s: sum(i["status"] == s for i in items) for s in ("passed", "failed", "skipped", "not run")}
        return {"status": status, "reason": why, "items": items, "figures": {"tests": len(items), **counts}}

    def instruments(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        figures: dict[str, Any] = {}
        names = list(PROBES)
        groups = [["all"]] if self.args.rehearsal else [[n] for n in names]
        for group in groups:
            if self.left() < self.min_start:
                items += [{"name": n, "status": "not run", "reason": "the phase's time was spent"} for n in names
                          if not any(i["name"] == n for i in items)]
                break
            probe = group[0]
            cmd = [str(HERE), "--probe", probe, "--work", str(self.work)]
            if self.args.rehearsal:
                cmd.append("--rehearsal")
            r = self.run(f"probe-{probe}", self.py(*cmd), self.args.probe_limit * (len(names) if probe == "all" else 1))
            for n in (names if probe == "all" else [probe]):
                f = self.work / "instruments" / f"{n}.json"
                try:
                    rec = json.loads(f.read_text())
                except (OSError, ValueError):
                    items.append({"name": n, "status": "failed", "reason": self.failure(r, f"the {n} probe")})
                    continue
                items.append({"name": n, **{k: rec[k] for k in ("status", "reason", "checks") if k in rec}})
                figures[n] = rec.get("figures", {})
        items.append(self.audit(figures))
        status, why = verdict(items)
        return {"status": status, "reason": why, "items": items, "figures": figures}

    def audit(self, figures: dict[str, Any]) -> dict[str, Any]:
        cmd = self.py("-m", "perflab", "audit", "--hf-config", "gpt2", "--no-breaks", "--json")
        small = self.args.rehearsal or not self.has_cuda()
        if small:  # a one-layer GPT-2: the plumbing, not a figure
            cmd += ["--hf-set", "n_layer=1", "n_embd=64", "n_head=2", "--steps", "2"]
        out = self.work / "instruments" / "audit.json"
        r = self.run("audit", cmd, self.args.probe_limit, stdout=out)
        try:
            rep = read_json(out)
        except (OSError, ValueError):
            return {"name": "audit", "status": "failed", "reason": self.failure(r, "perflab audit")}
        f = {k: rep.get(k) for k in ("mfu", "hfu", "mfu_basis", "peak_tflops", "step_s", "tokens_per_s", "flops_per_step")}
        figures["audit"] = f
        checks = [within("MFU at most 100 %", f["mfu"], 0.0, 1.0, "model FLOPs over the peak"),
                  within("HFU at most 100 %", f["hfu"], 0.0, 1.0, "hardware FLOPs over the peak"),
                  {"check": "MFU has a basis", "value": f["mfu_basis"], "ok": bool(f["mfu_basis"])}]
        if small:
            return {"name": "audit", "status": "skipped", "checks": checks,
                    "reason": "no CUDA GPU (or rehearsal): a one-layer GPT-2 on this device checks the command; "
                              "the MFU bound applies to the full model on a GPU"}
        bad = [c["check"] for c in checks if not c["ok"]]
        return {"name": "audit", "status": "failed" if bad else "passed", "checks": checks,
                **({"reason": "; ".join(bad)} if bad else {})}

    def reference(self) -> dict[str, Any]:
        kfile = self.work / "machine" / "reference-kinds.json"
        r = self.run("reference-kinds", self.py("-c", "import json; from perflab.course.reference import KINDS; "
                                                 "print(json.dumps(list(KINDS)))"), 90, stdout=kfile)
        try:
            kinds = read_json(kfile)
        except (OSError, ValueError):
            return {"status": "failed", "reason": self.failure(r, "reading the reference kinds"), "items": []}
        items: list[dict[str, Any]] = []
        if not self.has_cuda() and self.args.rehearsal:
            items += [{"name": k, "status": "skipped", "reason": "rehearsal: one kind recorded at smoke size"} for k in kinds[1:]]
            kinds = kinds[:1]
        out = self.work / "reference"
        for k in kinds:
            if self.left() < self.min_start:
                items.append({"name": k, "status": "not run", "reason": "the phase's time was spent"})
                continue
            cmd = self.py("-m", "perflab", "reference", "record", "--what", k, "--out", str(out), "--json")
            if not self.has_cuda():
                cmd += ["--smoke", "--allow-cpu"]
            r = self.run(f"reference-{k}", cmd, self.args.reference_limit)
            if r["rc"] != 0:
                items.append({"name": k, "status": "failed", "reason": self.failure(r, f"recording {k}"),
                              "seconds": r["seconds"]})
            elif not self.has_cuda():
                items.append({"name": k, "status": "skipped", "seconds": r["seconds"],
                              "reason": "no CUDA GPU: recorded at smoke size on the CPU, which checks the recorder; "
                                        "reference data come from a GPU"})
            else:
                items.append({"name": k, "status": "passed", "seconds": r["seconds"]})
        files = sorted(p.name for p in out.glob("*.json"))
        status, why = verdict(items)
        return {"status": status, "reason": why, "items": items, "figures": {"files": files}}

    def notebooks(self) -> dict[str, Any]:
        found = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")) + sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))
        patterns = self.args.notebooks or (REHEARSAL_NOTEBOOKS if self.args.rehearsal else ())
        if patterns:
            found = [p for p in found if any(fnmatch.fnmatch(str(p.relative_to(ROOT)), pat) for pat in patterns)]
        smoke = bool(self.args.rehearsal)
        items: list[dict[str, Any]] = []
        times: dict[str, float] = {}
        for nb in found:
            rel = str(nb.relative_to(ROOT))
            left = self.left()
            if left < self.min_start:
                items.append({"name": rel, "status": "not run",
                              "reason": f"not started: {max(left, 0):.0f} s of the budget left"})
                continue
            dest = self.work / "notebooks" / f"{nb.parent.name}__{nb.name}"
            limit = min(self.args.notebook_limit, left)
            r = self.run(f"nb-{nb.parent.name}__{nb.stem}",
                         self.py("-m", "papermill", str(nb), str(dest), "-p", "smoke", str(smoke), "-k", "python3",
                                 "--cwd", str(nb.parent), "--execution-timeout", str(int(limit)), "--no-progress-bar"),
                         limit)
            times[rel] = r["seconds"]
            if r["rc"] == 0:
                items.append({"name": rel, "status": "passed", "seconds": r["seconds"]})
            else:
                items.append({"name": rel, "status": "failed", "seconds": r["seconds"],
                              "reason": notebook_error(dest) or self.failure(r, "papermill")})
        status, why = verdict(items)
        return {"status": status, "reason": why, "items": items,
                "figures": {"smoke": smoke, "seconds": times, "not_run": [i["name"] for i in items if i["status"] == "not run"]}}
