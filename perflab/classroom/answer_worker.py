"""The confined process in which `perflab grade` runs a learner's answer functions (see judge.py).

The judge runs this file as a script (worker.py, `WORKER_SOURCE`) with `python -I -S` (isolated: no
PYTHONPATH, no script folder on the path, no site-packages' `.pth` files), inside the sandbox where
one is (sandbox.py), so the process starts with no perflab module loaded and no folder of the
course on its path. It talks to the judge over its stdin (requests, pickled by the judge) and a
private copy of its stdout (answers, as JSON: never pickled, so nothing the learner returns can run
code in the judge).

Its life has two phases:
1. trusted: set its own resource limits, import what the submission imports, then replace the code
   of every perflab function that computes an answer (the lab's `FORBIDDEN`, its references and
   checks) by code that ends this process with an exit status that names it; then refuse, in the
   kernel (seccomp.py), every new process and the keyring calls (so no child process, however it is
   started, computes an answer where nothing is disarmed), and install an audit hook (which cannot
   be removed) that ends the process when the learner's code opens a file of the course's labs or
   solutions or of a module that holds an answer, imports such a module afresh, starts a process,
   sends a signal, loads a C library through ctypes or walks the garbage collector's objects;
2. the learner's: run the submission's definitions, then answer the judge's requests (call a
   function on inputs the judge chose; read a value; run one of perflab's probes on a learner's
   object, or on data alone in a worker with no learner code) until stdin closes.
"""

import builtins
import json
import math
import os
import pickle
import re
import struct
import sys

_OUT = 1  # set by main(): a private copy of stdout, for the answers
_IN = None  # set by main(): stdin, for the requests
_EXIT_FORBIDDEN = 100  # + the index of the forbidden function (at most 99 named)
_EXIT_BLOCKED = 90
_TABLES = 99  # the index that names a function held in one of perflab's tables (a lambda)


def _read():
    assert _IN is not None, "main() sets the request stream first"
    head = _IN.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return pickle.loads(_IN.read(n))


def _write(obj):
    data = json.dumps(obj, allow_nan=False).encode()
    os.write(_OUT, struct.pack(">I", len(data)) + data)


def _encode(x, depth=0):
    """A JSON form of an answer: numbers, text, lists, dicts, tensors and arrays (tagged)."""
    if depth > 20:
        raise TypeError("an answer nested more than 20 deep")
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x if abs(x) < 2**63 else {"__float__": repr(float(x))}
    if isinstance(x, float):
        return x if math.isfinite(x) else {"__float__": repr(x)}
    if isinstance(x, (list, tuple)):
        return {"__seq__": type(x).__name__, "items": [_encode(v, depth + 1) for v in x]}
    if isinstance(x, dict):
        return {"__dict__": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in x.items()]}
    mod = type(x).__module__.split(".")[0]
    if mod == "torch" and hasattr(x, "tolist") and hasattr(x, "shape"):
        t = x.detach().cpu()
        return {"__tensor__": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                "data": _encode(t.reshape(-1).tolist(), depth + 1)}
    if mod == "numpy":
        if hasattr(x, "shape") and hasattr(x, "tolist"):
            return {"__array__": str(x.dtype), "shape": list(x.shape),
                    "data": _encode(x.reshape(-1).tolist() if x.shape else [x.tolist()], depth + 1)}
    if hasattr(x, "__float__") and not hasattr(x, "__len__"):
        return _encode(float(x), depth + 1)
    raise TypeError(f"an answer of type {type(x).__name__}, which the grader cannot read back")


def _tripwire(index, freevars=()):
    """Code that ends this process with the status that names forbidden function `index`; with the
    free variables of the closure it replaces (a code object's must match its function's)."""
    inner = "".join(f"        {v}\n" for v in freevars)
    src = ("def _outer():\n" + "".join(f"    {v} = None\n" for v in freevars)
           + f"    def _f(*args, **kwargs):\n{inner}        __import__('os')._exit({_EXIT_FORBIDDEN + index})\n"
           + "    return _f\n")
    ns = {}
    exec(compile(src, "<perflab-grade>", "exec"), ns)
    return ns["_outer"]().__code__


def _arm(fn, index):
    """`fn`'s code replaced by the tripwire (closures and lambdas included)."""
    import inspect

    if not inspect.isfunction(fn) or fn.__code__.co_filename == "<perflab-grade>":
        return
    code = _tripwire(min(index, 99), fn.__code__.co_freevars)
    if code.co_freevars != fn.__code__.co_freevars:
        return
    fn.__code__ = code.replace(co_name=fn.__code__.co_name, co_argcount=0, co_kwonlyargcount=0,
                               co_posonlyargcount=0)


def _functions_in(value, module, depth=0):
    """The functions of `module` held in a module-level value: the value itself, or what a dict,
    list, tuple or set holds (a table of lambdas: lab 12's mistakes), a few levels deep."""
    import inspect

    if inspect.isfunction(value):
        return [value] if value.__module__ == module else []
    if depth >= 4:
        return []
    items = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(
        value, (list, tuple, set, frozenset)) else []
    return [f for v in items for f in _functions_in(v, module, depth + 1)]


def _disarm(forbidden, keep=()):
    """Replace the code of each forbidden perflab function: calling it, however it was reached
    (an import, sys.modules, importlib, a closure, a table that holds it), ends this process. A
    (module, '*') entry: every function and class defined in that module. In the module of every
    entry, the lambdas and closures its tables hold are disarmed too (the functions in `keep` are
    the lab's helpers, left as they are)."""
    import importlib
    import inspect

    files = set()
    kept = set()
    for module, qualname in keep:
        obj = sys.modules.get(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if callable(obj):
            kept.add(id(inspect.unwrap(obj)))
    for i, (module, qualname) in enumerate(forbidden):
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a module this environment lacks: nothing of it to call
            continue
        files.add(os.path.realpath(getattr(mod, "__file__", "") or ""))
        if qualname == "*":
            objs = [v for v in vars(mod).values() if getattr(v, "__module__", None) == module
                    and (inspect.isfunction(v) or inspect.isclass(v))]
        else:
            obj = mod
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
            objs = [obj] if obj is not None else []
        for obj in objs:
            targets = []
            if inspect.isclass(obj):  # its own methods (a lab lists no class that perflab's helpers build on)
                targets = [v.__func__ if isinstance(v, (staticmethod, classmethod)) else v for v in vars(obj).values()]
                targets = [v.fget if isinstance(v, property) else v for v in targets]
            else:
                targets = [inspect.unwrap(obj)]  # type: ignore[arg-type]
            for fn in targets:
                if id(fn) not in kept:
                    _arm(fn, i)
        for value in list(vars(mod).values()):
            if not inspect.isfunction(value):  # the tables: named functions are listed by name
                for fn in _functions_in(value, module):
                    if id(fn) not in kept:
                        _arm(fn, _TABLES)
    return {f for f in files if f}


def _module_of(path):
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if file and os.path.realpath(file) == path:
            return name
    return None


def _guard(blocked_dirs, blocked_files, blocked_modules):
    dirs = tuple(os.path.realpath(d) + os.sep for d in blocked_dirs)
    files = frozenset(blocked_files)
    caches = tuple(os.path.join(os.path.dirname(f), "__pycache__",
                                os.path.splitext(os.path.basename(f))[0] + ".") for f in files)
    modules = frozenset(blocked_modules)
    names = frozenset(os.path.basename(f) for f in files)  # a relative open may be relative to any folder
    write, exit_ = os.write, os._exit

    def stop(code, event, args):
        write(2, f"perflab grade: stopped at {event} {str(args)[:200]}\n".encode())
        exit_(code)

    own = str(os.getpid())
    proc = re.compile(r"/proc/([0-9]+)/")
    # a process's scheduling counters (pid, state, CPU times: what perflab's quietness reads to tell
    # others' CPU time from its own) hold no memory, environment or command line
    counters = re.compile(r"/proc/[0-9]+/(task/[0-9]+/)?stat")
    real = os.path.realpath
    deny = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                      "os.forkpty", "os.kill", "os.killpg", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym",
                      "ctypes.addressof", "ctypes.cdata", "ctypes.PyObj_FromPtr", "ctypes.string_at",
                      "ctypes.wstring_at", "ctypes.cdata/buffer", "gc.get_objects", "gc.get_referrers",
                      "gc.get_referents", "sys.settrace", "sys.setprofile"})

    def hook(event, args):
        if event == "open":
            path = args[0]
            if isinstance(path, int):
                return
            try:
                p = real(os.fsdecode(path))
            except (TypeError, ValueError, OSError):
                return
            if p in files or p.startswith(dirs) or p.startswith(caches):
                stop(_EXIT_BLOCKED, event, args)
            name = os.fsdecode(path)
            if not os.path.isabs(name) and os.path.basename(name) in names:  # os.open(name, dir_fd=…)
                stop(_EXIT_BLOCKED, event, args)
            other = proc.match(p)
            if other and other.group(1) != own and not counters.fullmatch(p):  # another's memory, files, environment
                stop(_EXIT_BLOCKED, event, args)
        elif event == "import":
            name = args[0]
            if name in modules or name.split(".")[0] in ("labs", "solutions"):
                stop(_EXIT_BLOCKED + 1, event, args)
        elif event in deny:
            stop(_EXIT_BLOCKED + 2, event, args)

    sys.addaudithook(hook)


def main():
    global _OUT, _IN
    _OUT = os.dup(1)  # the answers go here; fd 1 and sys.stdout go to stderr (the learner may print)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _IN = sys.stdin.buffer
    setup = _read()
    if not isinstance(setup, dict):  # the judge closed the pipe before sending the setup
        return 2
    for path in reversed(setup.get("paths", ())):  # the judge's own perflab and site-packages (no .pth run)
        if path not in sys.path:
            sys.path.insert(0, path)
    # seccomp.py imports nothing but the standard library: the limits are set before anything else is imported
    from perflab.classroom import seccomp

    seccomp.set_limits(setup.get("limits"))
    for line in setup["preload"]:  # the submission's own import statements, and the lab's modules
        try:
            exec(compile(line, "<perflab-grade>", "exec"), {})
        except Exception:  # an import that fails here fails again, as the learner's error, below
            pass
    files = {f for f in _disarm(setup["forbidden"], setup.get("keep", ())) if _module_of(f) in setup["blocked_modules"]}
    files |= {os.path.realpath(f) for f in setup.get("blocked_files", ())}
    try:  # no new process from here on: a child would run where nothing is disarmed
        if not seccomp.supported():
            seccomp.install(no_processes=True)
        elif setup.get("seccomp"):
            raise RuntimeError(seccomp.supported())
    except Exception as e:  # noqa: BLE001 - confined as asked, or not at all: then say so
        if setup.get("seccomp"):
            _write({"ok": False, "error": f"the grader could not refuse new processes here ({e})"})
            return 2
    _guard(setup["blocked_dirs"], files, setup["blocked_modules"])
    import types

    main_module = types.ModuleType("__main__")  # the learner's definitions, as a notebook's: a module
    main_module.__dict__["__builtins__"] = builtins  # that tools find by name (torch.export, pickle)
    sys.modules["__main__"] = main_module
    ns = main_module.__dict__
    try:
        exec(compile(setup["code"], "<submission>", "exec"), ns)
        _write({"ok": True})
    except BaseException as e:  # noqa: BLE001 - the learner's definitions failed: the judge says how
        _write({"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        return
    while True:
        req = _read()
        if req is None:
            return
        kind, name, args, kwargs = req
        try:
            if kind != "run" and name not in ns:
                raise NameError(f"name {name!r} is not defined at the top level of the notebook")
            if kind == "call":
                value = ns[name](*args, **kwargs)
            elif kind == "probe":  # a perflab function (loaded in the trusted phase) run on the learner's object
                module, _, func = args[0].partition(":")
                value = getattr(sys.modules[module], func)(ns[name], *args[1:], **kwargs)
            elif kind == "run":  # a perflab function on data alone (a worker that runs no learner code)
                module, _, func = args[0].partition(":")
                value = getattr(sys.modules[module], func)(*args[1:], **kwargs)
            else:
                value = ns[name]
            out = {"value": _encode(value)}
        except NotImplementedError:
            out = {"not_done": True}
        except SystemExit as e:  # a disarmed perflab function: leave at once, with its status
            if isinstance(e.code, int) and e.code >= _EXIT_FORBIDDEN:
                os._exit(e.code)
            out = {"error": f"SystemExit: {e.code}"}
        except BaseException as e:  # noqa: BLE001 - the learner's function failed: the judge says how
            out = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        _write(out)


if __name__ == "__main__":
    main()
