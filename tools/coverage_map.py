"""Coverage as a map of what never ran: a summary of `coverage json` output for perflab/.

    python tools/coverage_map.py results/coverage.json [--list N]

Prints the line coverage per package, then splits the lines no test ran into those under a CUDA
branch or in a GPU-only function (tools/gpu_table.py finds them: a CPU machine cannot run them)
and the CPU-reachable rest, naming the functions with the most CPU-reachable lines never run. A
function listed in a file of tools/coverage_reasons/ (one per package: "module:function  reason")
is reported with its reason instead.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_table import ROOT, gpu_lines  # noqa: E402

REASONS = ROOT / "tools" / "coverage_reasons"


def _reasons() -> dict[str, str]:
    out = {}
    for path in sorted(REASONS.glob("*.txt")):
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, why = line.partition("  ")
                out[key.strip()] = why.strip()
    return out


def _functions(path: Path) -> list[tuple[int, int, str]]:
    tree = ast.parse(path.read_text())
    out = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((n.lineno, n.end_lineno or n.lineno, n.name))
    return out


def summarize(report: dict, top: int = 15) -> str:
    gpu = gpu_lines()
    reasons = _reasons()
    per_pkg: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    gpu_missing = cpu_missing = 0
    by_func: dict[str, int] = defaultdict(int)
    for fname, data in report["files"].items():
        rel = Path(fname).resolve().relative_to(ROOT).as_posix() if Path(fname).is_absolute() else fname
        if not rel.startswith("perflab/"):
            continue
        parts = rel.split("/")
        pkg = parts[1] if len(parts) > 2 else "(top)"
        s = data["summary"]
        per_pkg[pkg][0] += s["covered_lines"]
        per_pkg[pkg][1] += s["num_statements"]
        funcs = _functions(ROOT / rel)
        for line in data["missing_lines"]:
            if line in gpu.get(rel, set()):
                gpu_missing += 1
                continue
            cpu_missing += 1
            inner = [f for f in funcs if f[0] <= line <= f[1]]
            name = min(inner, key=lambda f: f[1] - f[0])[2] if inner else "(module level)"
            by_func[f"{rel[:-3].replace('/', '.')}:{name}"] += 1
    total_c = sum(c for c, _ in per_pkg.values())
    total_n = sum(n for _, n in per_pkg.values())
    out = [f"coverage of perflab/ by the tests run: {total_c}/{total_n} lines ({total_c / max(total_n, 1):.0%})",
           "  " + ", ".join(f"{p} {c / max(n, 1):.0%}" for p, (c, n) in sorted(per_pkg.items())),
           f"lines never run: {gpu_missing} under a CUDA branch or in a GPU-only function (tools/gpu_table.py), "
           f"{cpu_missing} CPU-reachable"]
    worst = sorted(by_func.items(), key=lambda kv: -kv[1])
    explained = [(k, n) for k, n in worst if k in reasons]
    unexplained = [(k, n) for k, n in worst if k not in reasons]
    if unexplained:
        out.append(f"CPU-reachable lines never run, by function (first {top} of {len(unexplained)}):")
        out += [f"  {n:4d}  {k}" for k, n in unexplained[:top]]
    if explained:
        out.append("never run, with a listed reason (tools/coverage_reasons/):")
        out += [f"  {n:4d}  {k}: {reasons[k]}" for k, n in explained]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="perflab's coverage, split into GPU-only and CPU-reachable lines")
    ap.add_argument("report", help="coverage JSON (pytest --cov-report=json:PATH)")
    ap.add_argument("--list", type=int, default=15, help="how many functions to name")
    args = ap.parse_args(argv)
    path = Path(args.report)
    if not path.is_file():
        print(f"no coverage report at {path}: run `make coverage` (or pytest --cov=perflab "
              f"--cov-report=json:{path}) first", file=sys.stderr)
        return 2
    print(summarize(json.loads(path.read_text()), args.list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
