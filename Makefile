# The README's commands. `make lab` starts the course, `make test` runs every test.
# Both set up .venv first (tools/setup_env.py: the right torch, then perflab and its deps).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# JupyterLab listens on localhost only, with a random token (printed in the URL it shows).
LAB_PORT ?= 8888
# Jupyter refuses to start as root (common in GPU containers) unless told; the token still guards it.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup lab test test-all suite-budget test-fast test-browser test-gpu gpu-rehearsal gpu-wheels bench-trust coverage gpu-table lint clean-notebooks check-clean clean wheelhouse site release

# perflab's extras (pyproject.toml) each target needs: the lessons need `course`, and `kernels` (Triton,
# where its wheels exist) for lesson 04's compiled tiles and lesson 10's fused kernel
EXTRAS ?= course,kernels,test,site,hta
lab: EXTRAS = course,kernels
release: EXTRAS = course

setup:
	@$(PYTHON) tools/setup_env.py --venv $(VENV) --extras $(EXTRAS)

lab: setup
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
		--ServerApp.open_browser=False --LabApp.news_url=None \
		--ServerApp.root_dir=$(CURDIR) $(ROOT_FLAG) notebooks/00_setup_and_your_machine.ipynb

# Two pytest workers (pytest-xdist): many tests wait on torchrun ranks or notebook kernels; the
# lessons run one after another on one of them, the labs on the other (tests/conftest.py). On a GPU box the tests run
# one at a time, so no two measurements share the GPU.
JOBS ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 0 || echo 2)

# What each change runs (`make test`, and CI): every unit test, every lesson, lab and solution once
# under papermill, and the browser test on its lessons. Every test is timed and none fails for its
# time (tests/suite_clock.py); the run ends with tools/suite_budget.py's report against the suite's
# budget, which is a report here, not a failure (`make suite-budget` exits 1 when over it).
test: setup
	@mkdir -p results
	$(PY) -m pytest -n $(JOBS) --dist loadgroup; status=$$?; \
		$(PY) tools/suite_budget.py --top 10 || true; exit $$status

# The fuller run (before a release, or nightly): `make test`, plus a second top-to-bottom pass of
# every notebook in the same kernel (every cell can be re-run), every lesson in the browser, and line
# coverage of perflab/ in the test processes and every Python process they start (CLI runs,
# torchrun ranks, notebook kernels; pyproject.toml's [tool.coverage.run]), then the map of what never
# ran: CUDA-only lines apart from CPU-reachable ones (tools/coverage_map.py). Data a lingering child
# wrote after an earlier run is removed first.
test-all: setup
	@mkdir -p results; rm -f .coverage .coverage.*
	PERFLAB_NOTEBOOK_PASSES=2 PERFLAB_BROWSER_LESSONS=all $(PY) -m pytest -n $(JOBS) --dist loadgroup \
		--cov=perflab --cov-report= --cov-report=json:results/coverage.json; status=$$?; \
		$(PY) tools/coverage_map.py --list 15 results/coverage.json || true; \
		$(PY) tools/suite_budget.py --top 10 || true; exit $$status

# The last run held against the suite's time budget (tools/suite_budget.py): exits 1 when over it.
suite-budget:
	$(PYTHON) tools/suite_budget.py

# The real-machine check of the ladder's verdicts (tools/bench_trust.py): the same rung measured twice,
# A/A and A/B, each with the machine's quietness (and, on a GPU, the real-timing comparisons the GPU
# tests no longer assert). A benchmark that reports; it exits 0 unless it crashes.
bench-trust: setup
	$(PY) tools/bench_trust.py

# Every lesson driven in a real browser (make test drives the most-used ones; tests/notebooks/test_browser.py)
test-browser: setup
	PERFLAB_BROWSER_LESSONS=all $(PY) -m pytest tests/notebooks/test_browser.py

# Unit tests only (no notebook execution): seconds rather than minutes.
test-fast: setup
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "not notebooks"

# On a GPU box: the whole GPU check (tools/gpu_check; README, "GPU"), with the box's own python3
# and torch, no network and no .venv: the wheels of .whl/ (make gpu-wheels, on a machine with an index)
# go into a folder of the check's own; the tests marked gpu one at a time, the instruments against
# independent ones, the reference data, then every lesson and lab solution at full size, within
# GPU_BUDGET seconds. summary.json and one archive in $(GPU_OUT).
GPU_BUDGET ?= 420
GPU_OUT ?= results/gpu-check
test-gpu:
	@$(PYTHON) -c "import importlib.util as u, sys; t = u.find_spec('torch') and __import__('torch'); sys.exit(0 if t and t.cuda.is_available() else 'make test-gpu needs a CUDA GPU and a torch that sees it: $(PYTHON) has none (make gpu-rehearsal runs the check here)')"
	$(PYTHON) tools/gpu_check --out $(GPU_OUT) --budget $(GPU_BUDGET)

# The GPU check rehearsed on this machine, in a fresh temporary folder: every phase runs the part a CPU
# can and says what it left out (tests/repo/test_gpu_check.py runs it too).
gpu-rehearsal: setup
	$(PY) tools/gpu_check --rehearsal --out $$(mktemp -d) --budget 300

# The wheels an offline GPU box lacks to run the notebooks (papermill, ipykernel, ipywidgets, nbclient,
# ipyexperiments and what they need that the box lacks; never torch) into the git-ignored .whl/, for
# CPython $(PY) (default 3.12) on manylinux x86_64 (GPU_ARCH=aarch64 for an Arm box):
# `make gpu-wheels PY=3.11`. README, "GPU".
gpu-wheels:
	$(PYTHON) tools/gpu_wheels.py $(if $(GPU_ARCH),--arch $(GPU_ARCH)) $(if $(filter 3.%,$(PY)),--python $(PY))

# Line coverage of perflab/ over the unit tests (no notebooks), then the map of what never ran:
# lines under CUDA branches apart from CPU-reachable ones (tools/coverage_map.py).
coverage: setup
	@mkdir -p results; rm -f .coverage .coverage.*
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "not notebooks" --cov=perflab --cov-report= \
		--cov-report=json:results/coverage.json; status=$$?; \
		$(PY) tools/coverage_map.py results/coverage.json; exit $$status

# README's table of GPU-only code, regenerated from the source (tests/repo/test_gpu_table.py checks it).
gpu-table:
	$(PYTHON) tools/gpu_table.py --write

lint: setup
	$(VENV)/bin/ruff check perflab tests tools

# Strip outputs and execution counts from every notebook (tests/notebooks/test_notebooks_clean.py checks).
clean-notebooks: setup
	$(PY) -m perflab.course.nbclean notebooks labs

# The course as a static site in _site/ (tools/site.py): every lesson executed in smoke mode here,
# an index mirroring README's course map, each page naming the device of its figures. No network
# needed to build it or to read it (open _site/index.html).
site: setup
	$(PY) tools/site.py --out _site

# Every wheel the course needs except torch, for a box with no package index (README, "Offline"):
# `make wheelhouse PY=3.12 [ARCH=aarch64]`; then there `PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheelhouse make test`.
# (PY here is the target's Python version; without it, the version of $(PYTHON).)
ARCH ?= $(shell uname -m)
wheelhouse:
	$(PYTHON) tools/wheelhouse.py --arch $(ARCH) --dest wheelhouse \
		$(if $(filter 3.%,$(PY)),--python $(PY))

# The learners' copy of the course: no labs/solutions/, outputs cleared; a folder and a zip in
# $(RELEASE_DIR) (perflab/classroom/release.py; tests/repo/test_release.py proves no solution code is in it).
RELEASE_DIR ?= dist/release
release: setup
	$(PY) -m perflab release $(RELEASE_DIR)

clean:
	rm -rf $(VENV) results .pytest_cache
