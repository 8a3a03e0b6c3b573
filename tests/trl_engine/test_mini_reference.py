"""The miniature's numbers, held: a reduced run (one seed, a few steps) against a committed
reference, so a change of a held package version (pyproject's constraint-dependencies) or of
`cpu_kernels: portable`'s kernels, which would move README's table, fails here first.

The reduced run is the README command with smaller sizes, in a fresh interpreter (torch picks
its kernels once per process). It compares every number the run reports and a hash of every
saved model's tensors, bit for bit. To rewrite the reference after a deliberate change (and
then re-measure README's table):
`PYTHONPATH=tests uv run --group dev python tests/trl_engine/test_mini_reference.py`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import RECIPE_ENV, REPO, run_python

REFERENCE = Path(__file__).resolve().parent / "data" / "mini_reference.json"
REDUCED = [
    "seeds=[1]",
    "~arms.grpo_no_std",
    "warm_start.steps=40",
    "trainer.max_steps=3",
    "trainer.save_steps=3",
    "evaluation.every_steps=3",
    "evaluation.num_samples=16",
    "evaluation.pass_at_k=[1,4]",
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


def reduced_run(out: Path) -> dict:
    """Runs the reduced miniature into `out`; its numbers, weight hashes and conditions."""
    # The kernel variables are the config's to set (cpu_kernels); a caller's would be refused.
    env = {
        k: v
        for k, v in RECIPE_ENV.items()
        if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
    }
    proc = run_python(
        "recipes/darling_mini.py", f"output_dir={out}", *REDUCED, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "comparison.json").read_text())
    return {
        "overrides": REDUCED,
        "warm_start": summary["warm_start"],
        "arms": summary["arms"],
        "weights": {
            str(path.parent.relative_to(out)): weights_hash(path)
            for path in sorted(out.glob("seed-*/*/model.safetensors"))
            if path.parent.name == "warm_start"
        }
        | {
            str(path.parent.parent.relative_to(out)): weights_hash(path)
            for path in sorted(out.glob("seed-*/*/final/model.safetensors"))
        },
        "conditions": summary["conditions"],
    }


@pytest.mark.slow  # 52-82 s measured on 2 cores at load average 10: the README command, reduced
def test_the_reduced_miniature_repeats_its_reference_bit_for_bit(tmp_path):
    # Skipped only where the CPU cannot run portable's kernels: on an AVX2 CPU, a run that
    # used other kernels (portable changed) must fail, not skip.
    capability = torch.backends.cpu.get_cpu_capability()
    if platform.machine().lower() not in ("x86_64", "amd64") or capability not in (
        "AVX2",
        "AVX512",
    ):
        pytest.skip(f"the reference holds for x86-64 CPUs with AVX2 (torch uses {capability})")
    reference = json.loads(REFERENCE.read_text())
    result = reduced_run(tmp_path)
    assert result["overrides"] == reference["overrides"], "REDUCED changed: rewrite the reference"
    moved = [
        key
        for key in ("warm_start", "arms", "weights")
        if json.dumps(result[key], sort_keys=True) != json.dumps(reference[key], sort_keys=True)
    ]
    before, now = reference["conditions"], result["conditions"]
    conditions = [
        f"{key} {before.get(key)} -> {now.get(key)}"
        for key in sorted(before.keys() | now.keys())
        if before.get(key) != now.get(key)
    ]
    assert not moved, (
        f"the reduced miniature's {', '.join(moved)} differ from {REFERENCE.name} "
        f"(conditions that differ: {', '.join(conditions) or 'none recorded'}): "
        "README's table no longer reproduces. If the change is deliberate, rewrite the "
        "reference (this file's docstring) and re-measure README's table."
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        written = reduced_run(Path(scratch))
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE.relative_to(REPO)}")
