"""``vitlit env``: what this machine has, and the flags that suit it.

    python -m vitlit env

Prints the versions that matter (Python, torch with its CUDA and cuDNN, torchvision, timm, Lightning), each GPU
with its memory, compute capability and bf16 support, whether ``torch.compile`` works here (a tiny function is
compiled in a separate process), the CPU cores DataLoader workers can use, and one verdict line with the precision
and data path to pass. It exits 0 on a machine without a GPU.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from typing import Any

import torch

from vitlit.data.base import cpu_cores

_COMPILE_PROBE = "import torch; f = torch.compile(lambda x: x * 2 + 1); assert f(torch.ones(4)).sum().item() == 12"


def compile_works(timeout: float = 300.0) -> tuple[bool, str]:
    """Whether ``torch.compile`` (inductor, which needs a C/C++ compiler on the CPU) compiles and runs a function.

    Checked in a fresh process, so a crash or a hang cannot take this one with it.
    """
    try:
        done = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:.0f} s"
    if done.returncode == 0:
        return True, "works"
    last = (done.stderr.strip().splitlines() or ["failed"])[-1]
    return False, last[:160]


def verdict(gpus: list[dict[str, Any]]) -> str:
    """The flags to pass on this machine, as one line."""
    if not gpus:
        return (
            "verdict: no GPU; train small models with --trainer.accelerator cpu --trainer.precision bf16-mixed "
            "(or 32-true) and --data.source memory (configs/digits.yaml is such a recipe)"
        )
    precision = "bf16-mixed" if all(g["bf16"] for g in gpus) else "16-mixed"
    why = "the GPU computes in bf16" if precision == "bf16-mixed" else "the GPU has no fast bf16 (older than Ampere)"
    return (
        f"verdict: use --trainer.precision {precision} ({why}) and --data.source memory (the images held on the "
        f"GPU, no worker processes) where they fit; otherwise --data.num_workers {cpu_cores()}"
    )


def versions() -> dict[str, str]:
    """The versions a result depends on: Python, torch with its CUDA and cuDNN, torchvision, timm, Lightning."""
    import lightning
    import timm
    import torchvision

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none (CPU build)",
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none",
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "lightning": lightning.__version__,
    }


def env(compile_check: bool = True) -> dict[str, Any]:
    """Print this machine's versions, GPUs and capabilities, and the flags that suit it.

    Args:
        compile_check: Also check that ``torch.compile`` works (compiling takes up to two minutes on a CPU);
            ``false`` is the quick check (a second or two).
    """
    gpus = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        props = torch.cuda.get_device_properties(i)
        gpus.append({
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}",
            "bf16": props.major >= 8,  # Ampere and newer compute in bf16 natively
        })  # fmt: skip
    report: dict[str, Any] = {**versions(), "cpu_cores": cpu_cores(), "gpus": gpus}
    for key in ("python", "torch", "cuda", "cudnn", "torchvision", "timm", "lightning"):
        print(f"{key}: {report[key]}")
    print(f"cpu cores for DataLoader workers: {report['cpu_cores']}")
    if not gpus:
        print("gpus: none")
    for i, gpu in enumerate(gpus):
        bf16 = "bf16: yes" if gpu["bf16"] else "bf16: no"
        print(f"gpu {i}: {gpu['name']}, {gpu['memory_gib']} GiB, compute capability {gpu['capability']}, {bf16}")
    if compile_check:
        print("torch.compile: checking (compiles a tiny function in a new process; up to two minutes on a CPU; "
              "--compile_check false skips it) ...", flush=True)  # fmt: skip
        works, detail = compile_works()
        report["torch_compile"] = works
        print(f"torch.compile: {'yes' if works else 'no'} ({detail})")
    report["verdict"] = verdict(gpus)
    print(report["verdict"])
    return report
