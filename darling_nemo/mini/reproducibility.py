"""What the miniature's numbers depend on besides its config, pinned where it can be.

A run repeats bit for bit on one machine, but the RL runs amplify float rounding: a
different last bit in one logit flips a sampled answer, and from then on the run follows
another trajectory. So the same config gives other per-seed numbers (and other means over
5 seeds) wherever the floats differ:

- CPU kernels. torch picks SIMD kernels for the CPU it finds (AVX-512, AVX2, NEON, ...) and
  MKL picks its own code path; each rounds differently. The miniature's arithmetic is ATen's
  own kernels plus MKL's SGEMM: MKL_VERBOSE lists no other MKL call, ONEDNN_VERBOSE no oneDNN
  primitive, and capping glibc's libm variants (GLIBC_TUNABLES) changes no bit.
  `cpu_kernels: portable` pins ATen's AVX2 kernels, MKL's COMPATIBLE branch (SSE2 without
  the rcpps/rsqrtps approximations, which differ between Intel and AMD: the branch MKL
  documents as reproducible on both) and caps oneDNN at AVX2 (unused today; a torch that
  routes an op there gets the same cap), so every x86-64 CPU with AVX2 runs the same code.
  Shown on one Intel Xeon (AVX-512): the reduced miniature is bit-identical under every
  MKL, oneDNN and libm instruction-set cap (docs/miniature.md). It must be set before torch
  computes anything (all are chosen once, at first use).
- One MKL call escapes those settings: ATen hands torch.sqrt to MKL's vector maths (vsSqrt),
  not correctly rounded in the COMPATIBLE branch, and torch's AdamW uses it. An AMD EPYC and
  an Intel Xeon agreed on every primitive of the cpu fingerprint but AdamW
  (darling_nemo/mini/fingerprint.py), so `portable` also takes `PortableAdamW`
  (darling_nemo/mini/optim.py): the same update with a correctly rounded sqrt.
- Thread count: `torch_threads` (fixed; MKL reproduces only at a fixed thread count).
- Library versions (torch, transformers, trl, ...): held for `uv run` by pyproject's
  constraint-dependencies, recorded by `run_conditions`, checked by
  tests/trl_engine/test_mini_reference.py.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any, Literal

from darling_nemo.schema import ConfigError

PORTABLE_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
# The packages pyproject's constraint-dependencies hold (what the numbers may depend on).
LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "numpy",
    "tokenizers",
    "safetensors",
    "datasets",
)


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


def cpu_identity() -> tuple[str, str]:
    """(model name, "vendor family F model M") from /proc/cpuinfo; the platform's words elsewhere."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if not line.strip():
                break  # the first processor's block is enough
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    vendor = fields.get("vendor_id", platform.machine())
    family = f"{vendor} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return name, family


def run_conditions() -> dict[str, Any]:
    """Library versions, CPU, torch's kernels and thread count, as this process runs them."""
    import torch

    cpu, cpu_family = cpu_identity()
    return {
        "python": platform.python_version(),
        **{name: importlib.metadata.version(name) for name in LIBRARIES},
        "cpu": cpu,
        "cpu_family": cpu_family,
        "logical_cores": os.cpu_count(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "unset"),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "unset"),
        "torch_threads": torch.get_num_threads(),
    }
