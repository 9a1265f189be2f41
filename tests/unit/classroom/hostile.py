"""The adversarial corpus of `perflab grade`: one class, written as determined learners would write
it against the grader's design, graded once (test_sandbox.py's `hostile` fixture reads it).

Each learner is a folder of the class; `CLASSES` says which class of attack each one belongs to.
The judge-side attacks on labs 06, 10 and 12 hand in the solution's answers with one answer
replaced; the course's notebooks for those labs are small (their imports and stubs), so that the
kernel's run costs little and the judge does the work.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

from perflab.classroom.answer_source import MAX_NOTEBOOK_BYTES, MAX_NOTEBOOK_CELLS

from .test_judge import FORGERIES as JUDGE_FORGERIES
from .test_judge import RIGHT_LCG

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "labs"
SETUP = "from perflab.grading import checks as grading\nfrom perflab.dataloading import lab07 as lab\n\ngrading.reset()"
STUB = ('def lcg_index(i, n, a, c, x0):\n    """Entry i of the LCG permutation of n items."""\n'
        '    raise NotImplementedError\n\n\nlab.check_index(lcg_index)')
RIGHT = RIGHT_LCG.strip() + "\n\n\nlab.check_index(lcg_index)"
SOLUTION = LABS / "solutions" / "07_shuffle.ipynb"
TESTS_WITH_ANSWER = ROOT / "tests" / "unit" / "classroom" / "test_judge.py"  # holds a right lcg_index
# the teacher's own copy of the course, outside the checkout (a second clone, a released copy)
OTHER_COPY = Path.home() / ".cache" / f"perflab-corpus-{os.getpid()}" / "labs" / "solutions" / "07_shuffle.ipynb"
SECRETS = {"PERFLAB_CORPUS_TOKEN": "s3cr3t-of-the-teacher", "DATABASE_URL": "postgres://teacher:pw-db-4711@db/grades",
           "PIP_INDEX_URL": "https://teacher:pw-pip-4711@pypi.example/simple",
           "HTTPS_PROXY": "http://teacher:pw-proxy-4711@proxy:3128", "MYSQL_PWD": "pw-mysql-4711"}
# the answer taken from a file: the right function's source between two markers of the file
FROM_FILE = ('def lcg_index(i, n, a, c, x0):\n    src = _read()\n    body = src[src.index("def lcg_index"):]\n'
             '    body = body[:body.index("\\n\'\'\'")] if "\\n\'\'\'" in body else body.split("lab.check_index")[0]\n'
             '    body = body.replace("\\\\n", "\\n").replace(\'\\\\"\', \'"\')\n'
             '    ns = {"lab": lab}\n    exec(body, ns)\n    return ns["lcg_index"](i, n, a, c, x0)\n')

# the course's small notebooks for the labs whose judge is attacked: imports, then stubs
COURSE = {
    "06_ring_allreduce": "import torch\nimport torch.distributed as dist\n\nfrom perflab.grading import checks as grading\n"
                         "from perflab.distributed import lab06 as lab\n\ngrading.reset()",
    "10_graph_breaks": "import torch\n\nfrom perflab.compiler import models\nfrom perflab.compiler import lab10 as lab\n"
                       "from perflab.grading import checks as grading\n\ngrading.reset()",
    "12_sharding": "from perflab.grading import checks as grading\nfrom perflab.shard import lab12 as lab\n\ngrading.reset()",
}
NAMES = {"06_ring_allreduce": ("def ring_bytes_per_rank", "def busbw_gbps", "def ring_all_reduce"),
         "10_graph_breaks": ("def rope_real", "class MyLM"), "12_sharding": ("def bubble", "def fsdp_bytes")}


def reader(how: str, path: Path) -> str:
    """A `_read()` that reads `path` without Python's `open` (the audit hook's event)."""
    d, f = str(path.parent), path.name
    return {
        "dir_fd": f"def _read():\n    import os\n    fd = os.open({d!r}, os.O_RDONLY)\n    g = os.open({f!r}, os.O_RDONLY, dir_fd=fd)\n"
                  "    return os.read(g, 10**7).decode()\n",
        "torch": f"def _read():\n    import torch\n    t = torch.from_file({str(path)!r}, size=os.path.getsize({str(path)!r}), "
                 "dtype=torch.uint8)\n    return bytes(t.tolist()).decode()\n\nimport os\n",
        "subprocess.sys": f"def _read():\n    import subprocess, types\n    subprocess.sys = types.SimpleNamespace(audit=lambda *a: None, "
                          f"platform='linux')\n    return subprocess.run(['cat', {str(path)!r}], capture_output=True, text=True).stdout\n",
        "open": f"def _read():\n    return open({str(path)!r}).read()\n",
    }[how]


def daemon(code: str) -> str:
    """Kernel code that leaves a process behind (a double fork and setsid) running `code`."""
    return ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            + "".join(f"        {ln}\n" for ln in code.splitlines()) + "        os._exit(0)\n    os._exit(0)\n"
            "os.wait()\n")


def answers_of(lab: str) -> list[str]:
    """The solution's cells that define the lab's answers, their check calls left out."""
    nb = json.loads((LABS / "solutions" / f"{lab}.ipynb").read_text())
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "code" and any(n in src for n in NAMES[lab]):
            out.append("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("lab.check", "_ = lab."))))
    return out


def kernel_forgeries(subs: Path, victim: Path, daemon_socket: Path) -> dict[str, list[str]]:
    """Last round's corpus (lab 07): learner → cells added after the stub."""
    solution_cell = json.dumps(next("".join(c["source"]) for c in json.loads(SOLUTION.read_text())["cells"]
                                    if "def lcg_index" in "".join(c["source"])))
    own_rewrite = ("import glob, json, os\nsol = " + solution_cell + "\n"
                   "for p in glob.glob('/proc/*/cmdline'):\n    try:\n        args = open(p).read().split('\\0')\n"
                   "    except OSError:\n        continue\n    for a in args:\n"
                   "        if a.endswith('.ipynb') and os.path.isfile(a):\n            try:\n"
                   "                nb = json.load(open(a))\n                nb['cells'].append({'cell_type': 'code', "
                   "'metadata': {}, 'outputs': [], 'execution_count': None, 'source': sol})\n"
                   "                json.dump(nb, open(a, 'w'))\n            except Exception:\n                pass\n")
    purelib = sysconfig.get_paths()["purelib"]
    pyc = ROOT / "perflab" / "dataloading" / "__pycache__" / f"lab07.{sys.implementation.cache_tag}.pyc"
    return {
        # tampering before the judge reads
        "rewrites_its_submission": [own_rewrite],
        "overwrites_another": [f"import json\nnb = json.load(open({str(victim)!r}))\n"
                               f"nb['cells'] = nb['cells'][:2]\njson.dump(nb, open({str(victim)!r}, 'w'))"],
        "restores_later": [daemon(f"import time\ntime.sleep(8)\nopen({str(victim)!r}, 'a').write(' ')")],
        "reads_another_learner": [f"def lcg_index(i, n, a, c, x0):\n    import json\n    nb = json.load(open({str(victim)!r}))\n"
                                  "    src = [''.join(c['source']) for c in nb['cells'] if 'def lcg_index' in ''.join(c['source'])]\n"
                                  "    ns = {'lab': lab}\n    exec(src[-1].split('lab.check_index')[0], ns)\n"
                                  "    return ns['lcg_index'](i, n, a, c, x0)"],
        # poison that outlives the learner
        "writes_a_pth": [f"open({purelib + '/zz_perflab_poison.pth'!r}, 'w').write("
                         "'import perflab.grading.checks as g; g.record = lambda *a, **k: None\\n')"],
        "rewrites_a_pyc": [f"import os\nos.makedirs({str(pyc.parent)!r}, exist_ok=True)\nopen({str(pyc)!r}, 'wb').write(b'x')"],
        "writes_into_the_course": [f"open({str(ROOT / 'perflab' / 'poison.py')!r}, 'w').write('x = 1')"],
        # reading the grader
        "reads_the_graders_memory": ["import glob\nfound = []\nfor p in glob.glob('/proc/[0-9]*/environ'):\n"
                                     "    try:\n        found.append(open(p, 'rb').read())\n    except OSError:\n        pass\n"
                                     "for p in glob.glob('/proc/[0-9]*/mem'):\n    try:\n        open(p, 'rb').read(1)\n"
                                     "    except OSError:\n        pass\n"
                                     "assert len(found) <= 4, 'saw the grader'"],
        # left-behind processes
        "kills_the_workers": [daemon("import signal, time\nfor _ in range(200):\n    for p in os.listdir('/proc'):\n"
                                     "        if p.isdigit() and int(p) != os.getpid():\n            try:\n"
                                     "                os.kill(int(p), signal.SIGKILL)\n            except OSError:\n"
                                     "                pass\n    time.sleep(0.05)")],
        "serves_answers_over_a_socket": [daemon(
            "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('/tmp/answers.sock')\ns.listen()\n"
            "s.settimeout(20)\ntry:\n    c, _ = s.accept()\n    c.sendall(b'0')\nexcept OSError:\n    pass"),
            "import time\ntime.sleep(1)\n\ndef lcg_index(i, n, a, c, x0):\n    import socket\n"
            "    s = socket.socket(socket.AF_UNIX)\n    s.connect('/tmp/answers.sock')\n    return int(s.recv(10))"],
        "kills_its_grandparent": ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                  "os.kill(1, signal.SIGKILL)"],
        # around the audit hook: files read without `open`, the tests' answer, a process started
        "reads_the_solution_by_dir_fd": [reader("dir_fd", SOLUTION) + FROM_FILE],
        "reads_the_solution_with_torch": [reader("torch", SOLUTION) + FROM_FILE],
        "runs_cat_around_the_hook": [reader("subprocess.sys", SOLUTION) + FROM_FILE],
        "finds_the_answer_in_tests": [reader("open", TESTS_WITH_ANSWER) + FROM_FILE],
        "reads_tests_by_dir_fd": [reader("dir_fd", TESTS_WITH_ANSWER) + FROM_FILE],
        # denial of service and smaller faults
        "crafts_an_answer_frame": ["import os, struct, sys\n\ndef lcg_index(i, n, a, c, x0):\n"
                                   "    for fd in range(3, 20):\n        try:\n"
                                   "            os.write(fd, struct.pack('>I', 2**31 - 1) + b'[' * 2**16)\n"
                                   "        except OSError:\n            pass\n    return 0"],
        "forges_predictions": ["import json, os\nwith open(os.path.join(os.environ['PERFLAB_RESULTS'], 'predictions.jsonl'), 'a') as f:\n"
                               "    f.write(json.dumps({'lesson': '07', 'key': 'k', 'predicted': 1.0, 'measured': 1.0, "
                               "'error_pct': 0.0}) + '\\n')"],
        "=1+1": ["raise ValueError('\\x1b[2J\\x1b[31mcleared your screen\\x07')"],
        "exits_the_worker": ["def lcg_index(i, n, a, c, x0):\n    import os\n    os._exit(0)"],
        "deletes_the_class": [f"import shutil\nshutil.rmtree({str(subs)!r}, ignore_errors=True)\n"
                              f"shutil.rmtree({str(ROOT / 'labs')!r}, ignore_errors=True)"],
        "writes_the_teachers_home": ["import os\nfor p in ('/root/.bashrc', os.path.expanduser('~/.bashrc'), "
                                     "'/etc/perflab-poison'):\n    try:\n        open(p, 'a').write('x')\n"
                                     "    except OSError:\n        pass\nassert not os.path.exists('/etc/perflab-poison')"],
        "forks_in_the_worker": ["def lcg_index(i, n, a, c, x0):\n    import os\n    if os.fork() == 0:\n"
                                "        os._exit(0)\n    return 0"],
        "reads_the_graders_mem": ["import os\nseen = []\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n"
                                  "        try:\n            open(f'/proc/{p}/mem', 'rb').close()\n            seen.append(p)\n"
                                  "        except OSError:\n            pass\nassert len(seen) <= 4, 'read the grader'"],
        "reads_the_teachers_token": ["import os\nraise ValueError('token ' + os.environ.get('PERFLAB_CORPUS_TOKEN', 'none'))"],
        "talks_to_a_daemon": [f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(daemon_socket)!r})\ns.sendall(b'x')"],
        "many_sleepers": [daemon("import time\nfor _ in range(20):\n    if os.fork() == 0:\n        time.sleep(300)\n"
                                 "        os._exit(0)\ntime.sleep(300)")],
    }


# ----------------------------------------------------------------------------- this round's classes
def keyring_probe() -> str:
    """Kernel code that reads its session keyring and adds a key to it and to the user's; its
    error message says what each call returned."""
    return ("import ctypes, os\nfrom perflab.classroom.seccomp import ARCHES\nimport platform\n"
            "nr = ARCHES[platform.machine().lower()][2]\nlibc = ctypes.CDLL(None, use_errno=True)\nseen = []\n"
            "r = libc.syscall(nr['keyctl'], 0, -3, 0)\nseen.append(f'keyctl {r} errno {ctypes.get_errno()}')\n"
            "for ring in (-3, -4):\n"
            "    r = libc.syscall(nr['add_key'], b'user', b'perflab-corpus', b'x', 1, ring)\n"
            "    seen.append(f'add_key {r} errno {ctypes.get_errno()}')\n")


JUDGE_SIDE = {  # lab → learner → the answer cell that replaces the solution's
    "06_ring_allreduce": {
        "ring_through_c10d": (
            "def ring_all_reduce(x, rank, world_size):\n    import sys\n"
            "    import torch.distributed.distributed_c10d as c10d\n    out = x.clone()\n    c10d.all_reduce(out)\n"
            "    f = sys._getframe()\n    while f is not None:  # the watcher's counters, rewritten\n"
            "        seen = f.f_locals.get('seen')\n        if isinstance(seen, dict):\n"
            "            seen.update(collectives=[], bytes_sent=2 * (world_size - 1) * x.numel() // world_size * 4)\n"
            "        f = f.f_back\n    return out\n"),
        "ring_from_perflab": (
            "def ring_all_reduce(x, rank, world_size):\n    import importlib\n"
            "    for name in ('perflab.distributed.ring', 'perflab.distributed.collectives'):\n        try:\n"
            "            return importlib.import_module(name).ring_all_reduce(x, rank, world_size)\n"
            "        except Exception:\n            pass\n"
            f"    ns = {{}}\n    exec(open({str(ROOT / 'perflab' / 'distributed' / 'ring.py')!r}).read(), ns)\n"
            "    return ns['ring_all_reduce'](x, rank, world_size)\n"),
        "ring_forges_its_report": (
            "def ring_all_reduce(x, rank, world_size):\n    import json, os, struct\n    out = x * world_size\n"
            "    for d in ('.', '/tmp'):  # perfect rows where a rank's result file would be\n        try:\n"
            "            json.dump({'rank': rank, 'rows': [{'numel': x.numel(), 'collectives': [], 'shape_ok': True,\n"
            "                       'max_rel_error': 0.0, 'bytes_sent': 0}]}, open(f'{d}/rank{rank}.result.json', 'w'))\n"
            "        except OSError:\n            pass\n"
            "    h = json.dumps({'op': 'result', 'dtype': 'float32', 'shape': list(out.shape)}).encode()\n"
            "    for fd in range(3, 12):  # the judge's own frame, written on every descriptor\n        try:\n"
            "            os.write(fd, struct.pack('>II', len(h), 4 * out.numel()) + h + out.numpy().tobytes())\n"
            "        except OSError:\n            pass\n    os._exit(0)\n"),
        "ring_acts_on_the_judge": None,  # filled in by `judge_side` (the pid of a process of the grader's)
    },
    "10_graph_breaks": {
        "graph_hides_its_breaks": "explain",
        "graph_differs_when_traced": "is_compiling",
    },
    "12_sharding": {
        "child_computes_the_answer": (
            "def bubble(p, m):\n    import subprocess, sys, types\n"
            "    fake = types.SimpleNamespace(**{k: getattr(sys, k) for k in dir(sys) if not k.startswith('__')})\n"
            "    fake.audit = lambda *a: None\n    subprocess.sys = fake\n"
            "    out = subprocess.run([sys.executable, '-c', 'from perflab.shard import formulas as F; '\n"
            "                          f'print(F.bubble_fraction({p}, {m}))'], capture_output=True, text=True)\n"
            "    return float(out.stdout)\n"),
    },
}
BROKEN_FORWARD = '''class MyLM(models.BrokenLM):
    rope = staticmethod(rope_real)

    def forward(self, idx):
        s = idx.shape[1]
        angles = self.angles[:s]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        if self.verbose:
            print("activations", tuple(x.shape))
        scale = x.abs().max().item()
        if scale > 1e4:
            x = x / scale
        return self.head(self.norm(x))
'''
HIDES_BREAKS = BROKEN_FORWARD.replace("    rope = staticmethod(rope_real)\n", """    rope = staticmethod(rope_real)

    def __init__(self, *args, **kwargs):  # the grader's tracer told that there is no break
        super().__init__(*args, **kwargs)
        from perflab.compiler import breaks
        real = breaks.explain

        def explain(model, *a, **k):
            rep = real(model, *a, **k)
            rep.graph_breaks, rep.breaks = 0, []
            return rep

        breaks.explain = explain
""")
DIFFERS_WHEN_TRACED = BROKEN_FORWARD.replace("    def forward(self, idx):\n", """    def forward(self, idx):
        if torch.compiler.is_compiling():  # clean, and wrong, when traced; the original when run
            return torch.zeros(idx.shape[0], idx.shape[1], 64)
""")


def judge_side(sleeper_pid: int) -> dict[str, tuple[str, list[str]]]:
    """learner → (lab, code cells) for the attacks on the judges of labs 06, 10 and 12, and their
    honest controls."""
    acts = (f"SLEEPER = {sleeper_pid}\n\ndef ring_all_reduce(x, rank, world_size):\n    import json, os, sys\n"
            "    for d in ('.', '/tmp', os.environ.get('HOME', '.')):  # where the judge read pids to kill\n"
            "        try:\n            json.dump({'pid': SLEEPER, 'rank': 90 + rank}, open(f'{d}/rank{90 + rank}.where.json', 'w'))\n"
            "        except OSError:\n            pass\n"
            "    if rank == 0:  # what the judge passed on to its ranks\n"
            "        raise ValueError('env ' + ' '.join(f'{k}={v}' for k, v in os.environ.items()))\n"
            "    sys.stdout.write('x' * 2**22)\n    sys.stderr.write('y' * 2**22)  # megabytes of output\n"
            "    hog = [bytearray(2**28) for _ in range(64)]  # 16 GiB: past every limit\n    return x\n")
    out: dict[str, tuple[str, list[str]]] = {}
    for lab, attacks in JUDGE_SIDE.items():
        base = answers_of(lab)
        for who, cell in attacks.items():
            if who == "ring_acts_on_the_judge":
                cell = acts
            elif cell == "explain":
                cell = HIDES_BREAKS
            elif cell == "is_compiling":
                cell = DIFFERS_WHEN_TRACED
            out[who] = (lab, [*base, cell])
    out["ring_honest"] = ("06_ring_allreduce", answers_of("06_ring_allreduce"))
    out["bubble_honest"] = ("12_sharding", answers_of("12_sharding"))
    return out


def box_and_limits() -> dict[str, list[str]]:
    """learner → cells after lab 07's stub (or, for the worker, its answer): the files the grader
    reads, one learner's failure, the limits, the secrets, what is in view."""
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\n"
    libtorch = next((str(p) for p in Path(sysconfig.get_paths()["purelib"], "torch", "lib").glob("libtorch_cpu*")),
                    "/bin/sh")
    return {
        # files the grader and the judge read: links to a library and to /dev/zero, megabytes written
        "links_its_files": [
            "import os\nfor p, target in (('../results/predictions.jsonl', '/dev/zero'), "
            f"('../../grader/executed.ipynb', {libtorch!r})):\n    try:\n        os.remove(p)\n    except OSError:\n"
            "        pass\n    try:\n        os.symlink(target, p)\n    except OSError:\n        pass\n"],
        "worker_links_its_log": [
            "def lcg_index(i, n, a, c, x0):\n    import os, sys\n"
            "    for p in ('stderr.log', '../stderr.log', os.path.join(os.environ.get('HOME', '.'), 'stderr.log')):\n"
            "        try:\n            os.symlink('/dev/zero', p)\n        except OSError:\n            pass\n"
            "    sys.stderr.write('z' * 2**24)\n    sys.stderr.flush()\n    os._exit(3)\n"],
        # one learner stops the class: deep folders where the grader and the judge clean up
        "deep_in_its_box": [deep + "raise ValueError('box ' + os.path.dirname(os.path.dirname(os.getcwd().split('/d/')[0])))"],
        "deep_in_the_worker": ["def lcg_index(i, n, a, c, x0):\n    import os\n    here = os.getcwd()\n"
                               "    if not os.path.isdir('d'):\n        for _ in range(1500):\n"
                               "            os.mkdir('d')\n            os.chdir('d')\n"
                               "        os.chdir(here)\n    return i\n"],
        # the limits: memory of children together, processes, tmpfs and disk
        "children_share_memory": [
            "import os, time\npipes, pids = [], []\nfor _ in range(5):\n    r, w = os.pipe()\n    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os.close(r)\n        try:\n            b = bytearray(700 * 2**20)  # each under the per-process limit\n"
            "            os.write(w, b'1')\n        except MemoryError:\n            os.write(w, b'0')\n"
            "        time.sleep(30)\n        os._exit(0)\n    os.close(w)\n    pipes.append(r)\n    pids.append(pid)\n"
            "got = [os.read(r, 1) for r in pipes]\n"
            "# a child the kernel's OOM killer ended after it said '1' holds nothing now: count those alive together\n"
            "time.sleep(1)\n"
            "alive = [g == b'1' and os.waitpid(p, os.WNOHANG) == (0, 0) for p, g in zip(pids, got)]\n"
            "raise ValueError(f'children held {sum(alive)} of 5 x 700 MiB at once')"],
        "forks_without_end": [
            "import os, time\nkids = []\nfor _ in range(1200):\n    try:\n        pid = os.fork()\n    except OSError:\n"
            "        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    kids.append(pid)\n"
            "for pid in kids:\n    os.kill(pid, 9)\nraise ValueError(f'forked {len(kids)}')"],
        "fills_tmp_and_disk": [
            "import os\nwrote = {}\nfor where in ('/tmp', '/dev/shm', '.'):\n    n = 0\n    try:\n"
            "        for k in range(64):\n            with open(os.path.join(where, f'fill{k}'), 'wb') as f:\n"
            "                for _ in range(4):\n                    f.write(b'x' * 2**24)\n                    n += 2**24\n"
            "    except OSError:\n        pass\n    wrote[where] = n // 2**20\n"
            "raise ValueError(f'wrote MiB {wrote}')"],
        # the teacher's secrets (the environment, the keyrings) and what is in view (another copy of the
        # course, the system's secrets, the teacher's home)
        "reads_secrets_and_the_view": [
            keyring_probe() +
            f"for p in ({str(OTHER_COPY)!r}, '/etc/shadow', '/root/.bashrc', {str(ROOT / '.git')!r}, "
            f"{str(LABS / 'solutions')!r}, '/home', '/var'):\n    seen.append(f'{{p}}={{os.path.exists(p)}}')\n"
            "raise ValueError(' '.join(seen) + ' env ' + ' '.join(f'{k}={v}' for k, v in os.environ.items()))"],
        "reads_the_other_copy": [reader("open", OTHER_COPY) + FROM_FILE],
    }


def notebook(code_cells: list[str]) -> dict:
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "smoke = False", "outputs": [],
              "execution_count": None}]
    cells += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
              for c in code_cells]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                         "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def write(path: Path, nb: dict | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb).encode())
    return path


def bomb() -> bytes:
    """A notebook of 4 MiB of empty dicts in a cell's metadata: within the size and cell bounds."""
    nb = notebook([SETUP, STUB])
    head, tail = json.dumps(nb).split('"metadata": {}', 1)
    return (head + '"metadata": {"x": [' + ",".join(["{}"] * (4 * 2**20 // 3)) + "]}" + tail).encode()


def class_of(tmp: Path, daemon_socket: Path, sleeper_pid: int) -> tuple[Path, Path, dict[str, str]]:
    """The course and the submissions; learner → its class (see test_sandbox.py)."""
    course = tmp / "labs"
    asks = "\nfrom perflab.course import predict\nask = predict.ask"  # a lab that asks: predictions recorded
    write(course / "07_shuffle.ipynb", notebook([SETUP, STUB]))
    write(course / "11_asks.ipynb", notebook([SETUP + asks, STUB]))  # in the course, not graded here
    for lab, setup in COURSE.items():
        write(course / f"{lab}.ipynb", notebook([setup, "pass"]))
    subs = tmp / "submissions"
    victim = write(subs / "ada" / "07_shuffle.ipynb", notebook([SETUP, RIGHT]))
    classes = {"ada": "honest", "stan": "honest", "tom": "honest", "lin": "honest", "sam": "honest"}
    write(subs / "stan" / "07_shuffle.ipynb", notebook([SETUP, STUB]))
    write(subs / "tom" / "07_shuffle.ipynb", notebook([SETUP, "import torch\n\n" + RIGHT.replace(
        "    m = lab.modulus(n)", "    import torch\n    m = int(torch.tensor(lab.modulus(n)))")]))  # honest, with torch
    forgeries = kernel_forgeries(subs, victim, daemon_socket)
    for k, (_lab, _what, cells) in enumerate(f for f in JUDGE_FORGERIES if f[0] == "07_shuffle"):
        forgeries[f"judge_{k}"] = cells  # the judge's corpus (test_judge.py), through the whole grader
    for who, cells in forgeries.items():
        write(subs / who / "07_shuffle.ipynb", notebook([SETUP, STUB, *cells]))
        classes[who] = "last round"
    # a symbolic link to the solution, a folder that links to another learner's, a huge and a many-celled notebook
    (subs / "links").mkdir()
    (subs / "links" / "07_shuffle.ipynb").symlink_to(SOLUTION)
    (subs / "borrows").symlink_to(subs / "ada")
    write(subs / "huge" / "07_shuffle.ipynb", notebook([SETUP, STUB, "x = '" + "a" * (MAX_NOTEBOOK_BYTES + 10) + "'"]))
    write(subs / "cells" / "07_shuffle.ipynb", notebook([SETUP, STUB] + ["1"] * (MAX_NOTEBOOK_CELLS + 1)))
    classes.update({k: "last round" for k in ("links", "borrows", "huge", "cells")})
    # lab 15 as shipped, its solution and its stub handed in (graded with the class: done, and not done)
    write(course / "15_at_scale.ipynb", json.loads((LABS / "15_at_scale.ipynb").read_text()))
    write(subs / "lin" / "15_at_scale.ipynb", json.loads((LABS / "solutions" / "15_at_scale.ipynb").read_text()))
    write(subs / "sam" / "15_at_scale.ipynb", json.loads((LABS / "15_at_scale.ipynb").read_text()))
    # this round: the judges of labs 06, 10 and 12
    for who, (lab, cells) in judge_side(sleeper_pid).items():
        write(subs / who / f"{lab}.ipynb", notebook([COURSE[lab], *cells]))
        classes[who] = "honest" if who.endswith("_honest") else "measured where the learner runs"
    classes["ring_acts_on_the_judge"] = "lab 06's judge"
    # this round: the grader's files and cleanup, the limits, the secrets, the view
    kinds = {"links_its_files": "files read", "worker_links_its_log": "files read", "deep_in_its_box": "one learner", "deep_in_the_worker": "one learner",
             "children_share_memory": "limits", "forks_without_end": "limits", "fills_tmp_and_disk": "limits",
             "reads_secrets_and_the_view": "secrets", "reads_the_other_copy": "view"}
    for who, cells in box_and_limits().items():
        write(subs / who / "07_shuffle.ipynb", notebook([SETUP, STUB, *cells]))
        classes[who] = kinds[who]
    write(subs / "bomb" / "07_shuffle.ipynb", bomb())
    classes["bomb"] = "one learner"
    # names: a learner whose folder is another's name and a zero-width space
    write(subs / "ada\u200b" / "07_shuffle.ipynb", notebook([SETUP, RIGHT]))
    classes["ada\u200b"] = "names"
    OTHER_COPY.parent.mkdir(parents=True, exist_ok=True)
    OTHER_COPY.write_text(SOLUTION.read_text())
    return course, subs, classes
