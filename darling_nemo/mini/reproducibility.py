"""What the miniature's numbers depend on besides its config, pinned where it can be.

A run repeats bit for bit on one machine, but the RL runs amplify float rounding: a
different last bit in one logit flips a sampled answer, and from then on the run follows
another trajectory. So the same config gives other per-seed numbers (and other means over
5 seeds) wherever the floats differ:

- CPU kernels. torch picks SIMD kernels for the CPU it finds (AVX-512, AVX2, NEON, ...) and
  MKL picks its own code path; each rounds differently. `cpu_kernels: portable` pins
  ATen's AVX2 kernels and MKL's COMPATIBLE branch (the one MKL documents as reproducible
  on Intel and AMD alike), so every x86-64 CPU with AVX2 runs the same code. It must be set
  before torch computes anything (both are chosen once, at first use).
- Thread count: `torch_threads` (fixed; MKL reproduces only at a fixed thread count).
- Library versions (torch, transformers, trl, ...): recorded by `run_conditions`.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any, Literal

from darling_nemo.schema import ConfigError

PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
LIBRARIES = ("torch", "transformers", "trl", "accelerate", "numpy")


def pin_cpu_kernels(kind: Literal["portable", "native"]) -> list[str]:
    """Select torch's and MKL's CPU kernels (call before any torch operation); returns warnings.

    "native" leaves the choice to torch and MKL. "portable" sets PORTABLE_KERNELS in the
    environment; a different value already set there is refused (it is someone's explicit
    choice), and a CPU or process where torch does not then use AVX2 kernels is reported.
    """
    if kind == "native":
        return []
    clashes = [
        f"{name}={os.environ[name]}"
        for name, value in PORTABLE_KERNELS.items()
        if os.environ.get(name, value) != value
    ]
    if clashes:
        raise ConfigError(
            f"cpu_kernels: portable sets {PORTABLE_KERNELS}, but the environment has "
            f"{', '.join(clashes)}: unset it, or set cpu_kernels=native"
        )
    os.environ.update(PORTABLE_KERNELS)
    import torch

    used = torch.backends.cpu.get_cpu_capability()
    if used != "AVX2":
        return [
            f"cpu_kernels: portable asked torch for its AVX2 kernels, but it uses {used} (a CPU "
            "without AVX2, not x86-64, or torch computed something before the setting): the "
            "numbers will differ from a portable run on an AVX2 CPU"
        ]
    return []


def run_conditions() -> dict[str, Any]:
    """Library versions, CPU, torch's kernels and thread count, as this process runs them."""
    import torch

    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    return {
        "python": platform.python_version(),
        **{name: importlib.metadata.version(name) for name in LIBRARIES},
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "unset"),
        "torch_threads": torch.get_num_threads(),
    }
