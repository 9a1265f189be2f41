"""Run a program bound to its local rank's cores: what `perflab.distributed.torchrun.launch(..., bind=True)`
starts in every rank.

    python -m perflab.numa.bound TARGET [ARGS...]

TARGET is a module (`perflab.distributed.workers.collectives`) or a .py file. The rank's cores come from
`plan(LOCAL_WORLD_SIZE, read_topology())[LOCAL_RANK]`. With `numactl` installed the program is
exec'd under `numactl --physcpubind=CPUS --membind=NODE` (memory allocated on the rank's node too);
without it the process binds its CPUs with os.sched_setaffinity and runs the program in place
(memory then follows the kernel's first-touch policy, which a bound process mostly keeps local).
Either way the binding is printed, and every thread and process the program starts afterwards
(DataLoader workers included) inherits it.
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str] | None = None) -> None:
    from perflab.core.errors import InputError
    from perflab.numa.plan import bind_rank, numactl_available, plan
    from perflab.numa.topology import format_cpulist, read_topology

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        raise SystemExit("usage: python -m perflab.numa.bound TARGET [ARGS...]")
    target, args = argv[0], argv[1:]
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    try:
        mine = plan(local_world, read_topology(), allowed=sorted(os.sched_getaffinity(0)))[local_rank]
    except InputError as e:
        print(f"[perflab.numa.bound] rank {local_rank}: not bound ({e})", flush=True)
        mine = None
    program = [sys.executable, target, *args] if target.endswith(".py") else [sys.executable, "-m", target, *args]
    if mine is not None and numactl_available() and os.environ.get("PERFLAB_BIND_WITH", "numactl") == "numactl":
        cmd = ["numactl", f"--physcpubind={format_cpulist(mine.cpus)}"]
        if mine.node is not None:
            cmd.append(f"--membind={mine.node}")
        print(f"[perflab.numa.bound] rank {local_rank}: {' '.join(cmd)}", flush=True)
        os.execvp("numactl", cmd + program)
    if mine is not None:
        done = bind_rank(mine)
        print(f"[perflab.numa.bound] rank {local_rank}: CPUs {done.before} → {done.after} "
              f"(node {mine.node}; sched_setaffinity)", flush=True)
    sys.argv = [target, *args]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
