"""One rank of a learner's point-to-point job, run by `perflab grade`'s judge (ranks.py).

The judge starts one of these per rank, each in a sandbox of its own (its own network namespace,
its own private /tmp: no channel to another rank but the judge), where perflab is not in view:
this file and `seccomp.py` are the only ones of perflab bound in, and it imports nothing else of
perflab. It speaks to the judge on its stdin and on a private copy of its stdout (the learner's
prints go to stderr), in frames: an 8-byte header (the JSON's length, the payload's length), a
JSON header, a raw payload (a tensor's bytes).

1. trusted: read the start frame (the rank, the world size, the limits, the learner's code, the
   function's name, the inputs of every round), set the limits, import torch, make
   `torch.distributed`'s point-to-point calls talk to the judge (`isend`, `irecv`, `send`,
   `recv`, `batch_isend_irecv`, `P2POp`, `barrier`, `get_rank`, `get_world_size`; every collective
   refused, and said to the judge), then refuse every new process and the keyring calls (seccomp);
2. the learner's: run the code (an import of perflab binds a name that says perflab is not here),
   then call the function once per round on the judge's input, and send the judge what it returned.

Whatever the learner's code does here, what the judge grades is what it received: the bytes each
rank sent through it (counted there) and the tensors each returned (compared there with the sum
of the inputs it drew itself).
"""

import ast
import importlib.util
import json
import os
import struct
import sys
from typing import Any

_IN: Any = None  # the judge's end of the pipe, set in main
_OUT = 1
_STATE = {"rank": 0, "world": 1}


def _read_exact(n):
    data = b""
    while len(data) < n:
        chunk = _IN.read(n - len(data))
        if not chunk:
            raise EOFError("the judge closed the connection")
        data += chunk
    return data


def _frame():
    jn, pn = struct.unpack(">II", _read_exact(8))
    return json.loads(_read_exact(jn)), _read_exact(pn) if pn else b""


def _send(header, payload=b""):
    data = json.dumps(header).encode()
    buf = memoryview(struct.pack(">II", len(data), len(payload)) + data + payload)
    while buf:
        n = os.write(_OUT, buf)
        buf = buf[n:]


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _bytes_of(t):
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _tensor(header, payload):
    import torch

    dtype = getattr(torch, str(header.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise RuntimeError(f"a tensor of an unknown dtype {header.get('dtype')!r}")
    t = torch.frombuffer(bytearray(payload), dtype=torch.uint8).view(dtype) if payload else torch.empty(0, dtype=dtype)
    return t.reshape(header.get("shape", [t.numel()]))


def _peer(peer, what):
    if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < _STATE["world"]:
        raise ValueError(f"{what}: rank {peer!r} is not a rank of this group (0 to {_STATE['world'] - 1})")
    if peer == _STATE["rank"]:
        raise ValueError(f"{what}: rank {peer} is this rank itself")
    return peer


class _Work:
    """A finished request (a send: the judge has it)."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True


class _Receive(_Work):
    """A posted receive: the data is asked of the judge when it is waited for."""

    def __init__(self, tensor, src):
        self.tensor, self.src, self.done = tensor, src, False

    def wait(self, timeout=None):
        if not self.done:
            _send({"op": "recv", "src": self.src})
            header, payload = _frame()
            if header.get("op") != "data":
                raise RuntimeError(header.get("message", "the receive was refused"))
            got = _tensor(header, payload)
            if got.dtype != self.tensor.dtype or got.numel() != self.tensor.numel():
                raise RuntimeError(f"received {got.numel()} elements of {_dtype_name(got)} into a tensor of "
                                   f"{self.tensor.numel()} elements of {_dtype_name(self.tensor)}")
            with __import__("torch").no_grad():
                self.tensor.copy_(got.reshape(self.tensor.shape))
            self.src, self.done = header.get("src"), True
        return True

    def is_completed(self):
        return self.done

    def source_rank(self):
        return self.src


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    dst = _peer(dst if dst is not None else group_dst, "isend")
    _send({"op": "send", "dst": dst, "dtype": _dtype_name(tensor), "shape": list(tensor.shape)}, _bytes_of(tensor))
    return _Work()


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    isend(tensor, dst, group, tag, group_dst)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    src = src if src is not None else group_src
    return _Receive(tensor, None if src is None else _peer(src, "irecv"))


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    work = irecv(tensor, src, group, tag, group_src)
    work.wait()
    return work.src


class P2POp:
    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer if peer is not None else group_peer, group, tag


def batch_isend_irecv(p2p_op_list):
    works: list[Any] = [None] * len(p2p_op_list)
    for i, op in enumerate(p2p_op_list):  # the sends first: a receive waits for nothing that is not posted
        if op.op in (isend, send):
            works[i] = isend(op.tensor, op.peer, op.group, op.tag)
    for i, op in enumerate(p2p_op_list):
        if op.op in (irecv, recv):
            works[i] = irecv(op.tensor, op.peer, op.group, op.tag)
        elif works[i] is None:
            raise ValueError("batch_isend_irecv takes P2POp(dist.isend | dist.irecv, ...) only")
    return works


def barrier(group=None, async_op=False, device_ids=None):
    _send({"op": "barrier"})
    header, _ = _frame()
    if header.get("op") != "barrier":
        raise RuntimeError(header.get("message", "the barrier was refused"))
    return _Work() if async_op else None


def get_rank(group=None):
    return _STATE["rank"]


def get_world_size(group=None):
    return _STATE["world"]


COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter",
               "broadcast_object_list", "gather_object", "scatter_object_list")


def _refused(name):
    def collective(*args, **kwargs):
        _send({"op": "collective", "name": name})
        raise RuntimeError(f"dist.{name} is a collective: build the ring from point-to-point sends only")

    return collective


def _patch_distributed():
    import torch.distributed as dist

    for name, fn in (("isend", isend), ("irecv", irecv), ("send", send), ("recv", recv), ("P2POp", P2POp),
                     ("batch_isend_irecv", batch_isend_irecv), ("barrier", barrier), ("get_rank", get_rank),
                     ("get_world_size", get_world_size), ("is_initialized", lambda: True),
                     ("is_available", lambda: True), ("get_backend", lambda group=None: "perflab-grade")):
        setattr(dist, name, fn)
    for name in COLLECTIVES:
        setattr(dist, name, _refused(name))
    return dist


class _Absent:
    """A module the ranks do not have (perflab is not in view here): any use of it says so."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise ImportError(f"{self._name} is not in view on the grader's ranks: keep the function's code inside it "
                          "(torch and dist are there)")


def _define(code, ns):
    """Run the learner's code one top-level statement at a time; an import of a module that is not
    here binds its names to `_Absent`."""
    tree = ast.parse(code)
    for node in tree.body:
        try:
            exec(compile(ast.Module([node], type_ignores=[]), "<submission>", "exec"), ns)
        except ImportError:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                raise
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                ns[bound] = _Absent(getattr(node, "module", None) or alias.name)


def _confinement(path):
    """`seccomp.py`, loaded by its path (perflab is not in view here): its `set_limits` and `install`."""
    spec = importlib.util.spec_from_file_location("perflab_grade_seccomp", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    global _IN, _OUT
    _OUT = os.dup(1)  # frames to the judge; what the learner prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _IN = sys.stdin.buffer
    start, payload = _frame()
    _STATE.update(rank=int(start["rank"]), world=int(start["world_size"]))
    seccomp = _confinement(start["seccomp"])
    seccomp.set_limits(start.get("limits"))
    import math

    import torch

    torch.set_num_threads(1)
    dist = _patch_distributed()
    inputs, offset = [], 0
    for spec in start["rounds"]:
        n = int(spec["nbytes"])
        inputs.append(_tensor(spec, payload[offset:offset + n]))
        offset += n
    if not seccomp.supported():
        seccomp.install(no_processes=True)
    ns = {"__name__": "lab_ranks", "__builtins__": __builtins__, "torch": torch, "dist": dist, "math": math}
    try:
        _define(start["code"], ns)
        fn = ns[start["name"]]
    except BaseException as e:  # noqa: BLE001 - the learner's definitions failed: the judge says how
        _send({"op": "error", "message": f"{type(e).__name__}: {str(e)[:300]}"})
        return 0
    for x in inputs:
        try:
            out = fn(x.clone(), _STATE["rank"], _STATE["world"])
        except NotImplementedError:
            _send({"op": "not_done"})
            return 0
        except BaseException as e:  # noqa: BLE001 - the learner's function failed: the judge says how
            _send({"op": "error", "message": f"{type(e).__name__}: {str(e)[:300]}"})
            return 0
        if isinstance(out, torch.Tensor):
            _send({"op": "result", "dtype": _dtype_name(out), "shape": list(out.shape)}, _bytes_of(out))
        else:
            _send({"op": "result", "returned": type(out).__name__})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except EOFError:
        sys.exit(0)
