"""The miniature's numbers, held: a reduced run (one seed, a few steps) against a committed
reference, so a change of a held package version (pyproject's constraint-dependencies) or of
`cpu_kernels: portable`'s kernels, which would move README's table, fails here first.

The reduced run is the README command with smaller sizes, in a fresh interpreter (torch picks
its kernels once per process). Checked on every x86-64 CPU with AVX2:
- every number the run reports, exactly;
- the primitive fingerprint (darling_nemo/mini/fingerprint.py), less the lines known to
  depend on the CPU: matrix products under MKL's branch, elementwise maths, attention, the
  tiny Llama's forward, backward and sampling. Each such line held between an Intel Xeon and
  an AMD EPYC, and each moves under another kernel setting (MKL_CBWR, ATEN_CPU_CAPABILITY).
Checked where the reference's CPU family recorded them (`weights`, keyed "vendor family F
model M"): a hash of every saved model's tensors, bit for bit. Elsewhere the test says that
the weights were not compared, and how to record them.

To rewrite the reference after a deliberate change (and then re-measure README's table):
`PYTHONPATH=tests uv run --group dev python tests/trl_engine/test_mini_reference.py`; on a
CPU family the reference lacks, `... test_mini_reference.py --add-cpu` adds its weights only
(after the test passed there).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from helpers import HANG_GUARD_S, RECIPE_ENV, REPO, run_python

from darling_nemo.mini.fingerprint import held_across_cpus

REFERENCE = Path(__file__).resolve().parent / "data" / "mini_reference.json"
REDUCED = [  # the main job's warm start (100 steps) and arms; fewer seeds, steps and samples
    "seeds=[1]",
    "trainer.max_steps=3",
    "trainer.save_steps=3",
    "evaluation.every_steps=3",
    "evaluation.num_samples=16",
    "evaluation.pass_at_k=[1,4,16]",
    "differences=[pass@1,pass@16,distinct_correct]",
    "logging.report_to=[]",
    "logging.progress_bar=false",
]


def weights_hash(path: Path) -> str:
    """SHA-256 over a saved model's tensors (names and bytes), not the file's metadata."""
    from safetensors.numpy import load_file

    digest = hashlib.sha256()
    tensors = load_file(path)
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].tobytes())
    return digest.hexdigest()


def reduced_run(out: Path, workers: int = 1) -> dict:
    """Runs the reduced miniature into `out` (its arm runs `workers` at a time: the numbers
    must not depend on it); its numbers, weight hashes and conditions."""
    proc = run_python(
        "recipes/darling_mini.py",
        f"output_dir={out}",
        *REDUCED,
        f"workers={workers}",
        env=kernel_free_env(),
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "comparison.json").read_text())
    weights = {
        str(path.parent.relative_to(out)): weights_hash(path)
        for path in sorted(out.glob("seed-*/*/model.safetensors"))
        if path.parent.name == "warm_start"
    } | {
        str(path.parent.parent.relative_to(out)): weights_hash(path)
        for path in sorted(out.glob("seed-*/*/final/model.safetensors"))
    }
    return {
        "overrides": REDUCED,
        "warm_start": summary["warm_start"],
        "arms": summary["arms"],
        "weights": {summary["conditions"]["cpu_family"]: weights},
        "conditions": summary["conditions"],
    }


def kernel_free_env() -> dict[str, str]:
    """The kernel variables are the config's to set (cpu_kernels); a caller's would be refused."""
    drop = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
    return {k: v for k, v in RECIPE_ENV.items() if k not in drop}


def primitive_fingerprint() -> dict[str, str]:
    """The fingerprint's lines that hold on any x86-64 CPU with AVX2, from a fresh interpreter."""
    proc = run_python(
        "-m", "darling_nemo.mini.fingerprint", "--json", env=kernel_free_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    hashes = json.loads(proc.stdout.strip().splitlines()[-1])["hashes"]
    return held_across_cpus(hashes)


def differing(before: dict, now: dict) -> list[str]:
    return [
        f"{key} {before.get(key)} -> {now.get(key)}"
        for key in sorted(before.keys() | now.keys())
        if before.get(key) != now.get(key)
    ]


def skip_unless_portable_kernels_run_here() -> None:
    # Skipped only where the CPU cannot run portable's kernels: on an AVX2 CPU, a run that
    # used other kernels (portable changed) must fail, not skip.
    capability = torch.backends.cpu.get_cpu_capability()
    if platform.machine().lower() not in ("x86_64", "amd64") or capability not in (
        "AVX2",
        "AVX512",
    ):
        pytest.skip(f"the reference holds for x86-64 CPUs with AVX2 (torch uses {capability})")


def test_the_primitives_fingerprint_matches_on_any_cpu():
    skip_unless_portable_kernels_run_here()
    reference = json.loads(REFERENCE.read_text())["fingerprint"]
    moved = differing(reference, primitive_fingerprint())
    assert not moved, (
        f"primitives whose bits moved against {REFERENCE.name} (held on an Intel Xeon and an "
        f"AMD EPYC alike): {'; '.join(moved)}. A held package or the kernel settings changed."
    )


@pytest.mark.slow  # 52-82 s measured on 2 cores at load average 10: the README command, reduced
def test_the_reduced_miniature_repeats_its_reference_bit_for_bit(tmp_path):
    skip_unless_portable_kernels_run_here()
    reference = json.loads(REFERENCE.read_text())
    result = reduced_run(tmp_path, workers=2)  # recorded with 1 worker: the same numbers
    assert result["overrides"] == reference["overrides"], "REDUCED changed: rewrite the reference"
    conditions = differing(reference["conditions"], result["conditions"])
    moved = [
        key
        for key in ("warm_start", "arms")
        if json.dumps(result[key], sort_keys=True) != json.dumps(reference[key], sort_keys=True)
    ]
    family = result["conditions"]["cpu_family"]
    recorded = reference["weights"].get(family)
    if recorded is not None and recorded != result["weights"][family]:
        moved.append(f"weights (recorded on {family})")
    assert not moved, (
        f"the reduced miniature's {', '.join(moved)} differ from {REFERENCE.name} "
        f"(conditions that differ: {', '.join(conditions) or 'none recorded'}): "
        "README's table no longer reproduces. If the change is deliberate, rewrite the "
        "reference (this file's docstring) and re-measure README's table."
    )
    if recorded is None:
        same = [
            cpu
            for cpu, hashes in reference["weights"].items()
            if hashes == result["weights"][family]
        ]
        warnings.warn(
            f"numbers equal the reference; weights not compared: {REFERENCE.name} records none "
            f"for {family} (recorded: {', '.join(reference['weights'])}; these weights equal "
            f"{', '.join(same) or 'none of them'}). To record them: this file's docstring, --add-cpu.",
            stacklevel=1,
        )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        written = reduced_run(Path(scratch))
    if "--add-cpu" in sys.argv[1:]:
        kept = json.loads(REFERENCE.read_text())
        kept["weights"].update(written["weights"])
        written = kept
    else:
        written["fingerprint"] = primitive_fingerprint()
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE.relative_to(REPO)}")
