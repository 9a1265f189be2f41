"""Nsight Systems (`nsys`) and Nsight Compute (`ncu`) command lines for a profiled step.

    >>> print(commands("tiny-gpt", fault="sync")["nsys"])

Nothing here needs the tools: the commands are text. `available()` says which are on PATH, and
`run(...)` runs one only where it is present (on a GPU box); the course never requires them.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

from perflab.core.errors import UnsupportedError


def commands(preset: str = "tiny-gpt", fault: str = "none", steps: int = 3, out: str = "perflab_step") -> dict[str, str]:
    """`nsys profile` of a `perflab profile` run (CUDA, NVTX, OS runtime, cuBLAS/cuDNN), its summary
    report, and `ncu` on the first GEMM kernels (speed of light and the Tensor Core pipe's activity)."""
    py = shlex.quote(sys.executable)
    step = f"{py} -m perflab profile --preset {shlex.quote(preset)} --fault {shlex.quote(fault)} --steps {int(steps)}"
    return {
        "nsys": (f"nsys profile --trace=cuda,nvtx,osrt,cudnn,cublas --sample=none --cuda-memory-usage=true "
                 f"--force-overwrite=true -o {shlex.quote(out)} {step}"),
        "nsys_stats": f"nsys stats --report cuda_gpu_kern_sum,nvtx_sum {shlex.quote(out)}.nsys-rep",
        "ncu": (f"ncu --target-processes all --kernel-name regex:'gemm|xmma|cutlass' --launch-count 5 "
                f"--section SpeedOfLight --section ComputeWorkloadAnalysis "
                f"--metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active "
                f"-o {shlex.quote(out)}_ncu {step}"),
    }


def available() -> dict[str, bool]:
    return {tool: shutil.which(tool) is not None for tool in ("nsys", "ncu")}


def run(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run one of `commands()` if its tool is installed; UnsupportedError (one line) otherwise."""
    tool = command.split()[0]
    if shutil.which(tool) is None:
        raise UnsupportedError(f"{tool} is not installed here: run the command on a machine with NVIDIA Nsight")
    return subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout)


def show(preset: str, fault: str, steps: int, out: str, *, on_gpu: bool, smoke: bool) -> str:
    """The commands for a step, then the `nsys` run's last lines on a GPU with nsys (not in smoke mode), else why not."""
    cmds = commands(preset, fault=fault, steps=steps, out=out)
    text = "\n".join(f"{name}:\n  {c}" for name, c in cmds.items())
    have = available()["nsys"]
    if on_gpu and have and not smoke:
        return text + "\n" + run(cmds["nsys"]).stdout[-2000:]
    return text + "\nnot run here: " + ("no GPU" if not on_gpu else ("nsys not installed" if not have else "smoke mode"))
