"""The whole GPU check of the course, on a bare offline GPU box, within a hard time budget.

    python3 tools/gpu_check --out DIR [--budget 420]       # on the GPU box, with .whl/ beside it
    python3 tools/gpu_check --rehearsal --out DIR --budget 120   # here on a CPU (`make gpu-rehearsal`)

It uses the box's own `python3` and torch and never installs into them: the wheels of `.whl/` (made
by `make gpu-wheels` on a machine with a package index) go into a folder of their own, put first on
PYTHONPATH with the checkout, for every process the check starts. Then, each phase recorded in
`summary.json` as passed, failed or skipped with the reason, its seconds and its figures:

1. install: `.whl/` into the target folder (pip, or unpacked directly where pip fails), then the
   notebook modules imported from it;
2. machine: `nvidia-smi` (and its topology), Python, torch, CUDA, driver and triton versions,
   `perflab env --json`;
3. gpu_tests: the tests marked `gpu`, collected, then run one at a time, each with a time limit
   (a test over it is ended and reported, and the run goes on with the next);
4. instruments: perflab's instruments against independent ones: its timer against
   `triton.testing.do_bench` on a bf16 8192³ matmul and that matmul's TFLOP/s against the spec peak, a
   device-to-device copy (perflab's bandwidth against do_bench's), pinned against pageable host→device
   copies, lesson 13's Triton FlashAttention against SDPA (error and time), lesson 03's memory
   estimate against `torch.cuda.max_memory_allocated` for one GPT-2-small training step, and
   `perflab audit --hf-config gpt2` (MFU and its basis);
5. reference: `perflab reference record` for every kind, into the archive (not into data/);
6. notebooks: every lesson, then every lab solution, at full size (`smoke=False`) under papermill,
   each with its own time limit; none is started when too little of the budget is left, and the
   summary names those that did not run.

A phase that fails is recorded and the next one runs. Every process it starts has a time limit and
runs in its own process group, killed at its limit; the whole run ends within `--budget` seconds
(stopped from outside with SIGTERM, it kills its children and still writes what it has).
DIR ends up holding two kinds of file only: `summary.json`, and one archive of every log, figure file,
reference file and executed notebook (`gpu-check.tar.gz`, split into 15 MiB parts
`gpu-check.tar.gz.00`, `.01`, ... when larger; `cat gpu-check.tar.gz.* | tar xz` joins them), because a
GPU box often hands back only a few files of limited size. The work folder itself is temporary
(`--work` keeps it somewhere).

On a machine without a CUDA GPU every phase runs the part it can (tiny sizes, the Triton interpreter,
the recorder at smoke size, the tests' own skips) and says what it left out; `--rehearsal` also
shrinks the notebooks to one lesson and one lab solution in smoke mode, records one reference kind
and runs the probes in one process (each has its own on a GPU run), so that the whole plumbing runs
in one to two minutes here (tests/repo/test_gpu_check.py).
Standard library only at the top: the probes (`--probe NAME`, run as child processes) import torch.

The package, by idea: `main` (the arguments and the run), `runner` (the check's time budget and its
child processes), `phases` (the six phases), `probes` (the instruments' probes, in child processes),
`plugin` (the pytest plugin of the gpu_tests phase, `-p gpu_check.plugin`), `wheels` (the install
phase's wheel tags and unpacking), `records` (reading what children wrote, verdicts, key figures) and
`archive` (the archive, cut into parts).
"""
