"""The README's set-up lines, run as written (in bash, with the pip configuration varied)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers import REPO

README = (REPO / "README.md").read_text()


def setup_block() -> str:
    block = README.split("## Set-up on a fresh machine", 1)[1].split("```bash", 1)[1]
    return block.split("```", 1)[0]


def find_links_after_setup(tmp_path: Path, pip_config: str | None) -> str:
    export = next(line for line in setup_block().splitlines() if "UV_FIND_LINKS" in line)
    if pip_config is not None:  # the user-level file, where CI machines keep it
        config = tmp_path / ".config" / "pip" / "pip.conf"
        config.parent.mkdir(parents=True)
        config.write_text(pip_config)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    # `pip` as the README types it: the machine's own (its first line installs uv with it)
    assert shutil.which("pip"), "the README's set-up starts from a machine with pip on PATH"
    out = subprocess.run(
        ["bash", "-c", f'{export}\necho "$UV_FIND_LINKS"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_setup_never_leaves_uv_find_links_empty(tmp_path):
    # An ordinary machine: pip knows no find-links -> PyTorch's CPU wheel page, never "" (an
    # empty value would let uv resolve PyPI's multi-GB CUDA torch).
    assert find_links_after_setup(tmp_path, None) == "https://download.pytorch.org/whl/cpu/torch/"


def test_setup_uses_the_wheel_folder_pip_is_configured_with(tmp_path):
    wheels = tmp_path / "wheels"
    got = find_links_after_setup(tmp_path, f"[global]\nfind-links = {wheels}\n")
    assert got == str(wheels)


def test_the_readme_test_command_is_the_one_ci_runs():
    command = next(
        line.split("#")[0].strip() for line in setup_block().splitlines() if "pytest" in line
    )
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(command)}$", ci, flags=re.M), command
