"""containers/: one pin file, a Dockerfile that pins nothing itself, the build and squashfs
scripts (run with stand-ins for docker and enroot, which cannot run here), verify_stack.py."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

CONTAINERS = REPO / "containers"


def pins() -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f"set -a; source {CONTAINERS / 'pins.env'}; env -0"],
        capture_output=True,
        env={"PATH": os.environ["PATH"]},
        check=True,
    ).stdout.decode()
    names = re.findall(r"^([A-Z_][A-Z0-9_]*)=", (CONTAINERS / "pins.env").read_text(), re.M)
    values = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {n: values[n] for n in names}


def test_every_pin_is_a_build_arg_and_nothing_else_is_pinned():
    dockerfile = (CONTAINERS / "Dockerfile").read_text()
    args = set(re.findall(r"^ARG (\w+)$", dockerfile, re.M))
    assert args == set(pins()) - {"IMAGE_TAG"}
    code = "\n".join(line for line in dockerfile.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"\b\d+\.\d+\.\d+\b|:v\d|==\d", code), (
        "a version literal in the Dockerfile"
    )
    # The base stack pins restate NeMo-RL v0.4.0's uv.lock (docs: shared nemo-rl-v0.4.0.md).
    p = pins()
    assert p["NEMO_RL_IMAGE"].endswith(":v0.4.0") and p["NEMO_RL_REF"] == "v0.4.0"
    assert (p["TORCH_VERSION"], p["VLLM_VERSION"], p["CUDA_VERSION"]) == ("2.7.1", "0.10.0", "12.8")
    assert p["TRANSFORMER_ENGINE_VERSION"] == "2.5.0" and p["RAY_VERSION"] == "2.46.0"
    assert all("==" in pin for pin in p["DARLING_EXTRA_PINS"].split())


@pytest.fixture
def stand_ins(tmp_path):
    """docker and enroot that only record their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "enroot"):
        script = bin_dir / name
        script.write_text(
            f'#!/bin/bash\n{{ printf {name}; printf \' %q\' "$@"; echo; }} >> "$STAND_IN_LOG"\n'
        )
        script.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STAND_IN_LOG": str(tmp_path / "log")}
    return tmp_path, env


def test_build_passes_every_pin_and_the_environment_wins(stand_ins):
    tmp_path, env = stand_ins
    env["NEMO_RL_IMAGE"] = "registry.example.com/nemo-rl:mine"
    res = subprocess.run(
        [str(CONTAINERS / "build.sh"), "--push"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    argv = shlex.split((tmp_path / "log").read_text())
    assert argv[:4] == ["docker", "buildx", "build", "--load"]
    build_args = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")
    expected = {k: v for k, v in pins().items() if k != "IMAGE_TAG"}
    expected["NEMO_RL_IMAGE"] = "registry.example.com/nemo-rl:mine"
    assert build_args == expected
    assert argv[argv.index("--tag") + 1] == pins()["IMAGE_TAG"]
    assert argv[-2:] == ["--push", str(REPO)]  # extra docker args, then the context


def test_build_base_from_nemo_rl_source_at_the_ref(stand_ins):
    tmp_path, env = stand_ins
    env.update(BUILD_NEMO_RL_BASE="1", NEMO_RL_REF="r0.4.1")
    res = subprocess.run(
        [str(CONTAINERS / "build.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    first, second = (shlex.split(line) for line in (tmp_path / "log").read_text().splitlines())
    assert (
        "NRL_GIT_REF=r0.4.1" in first
        and first[-1] == "https://github.com/NVIDIA-NeMo/RL.git#r0.4.1"
    )
    assert "NEMO_RL_IMAGE=nemo-rl:r0.4.1" in second and "NEMO_RL_REF=r0.4.1" in second


def test_make_squashfs(stand_ins):
    tmp_path, env = stand_ins
    script = str(CONTAINERS / "make_squashfs.sh")
    out = tmp_path / "images" / "darling.sqsh"
    res = subprocess.run(
        [script, "darling-nemo:test", str(out)], env=env, capture_output=True, text=True
    )
    assert res.returncode != 0  # the stand-in enroot writes no file, so `ls` fails
    res = subprocess.run(
        [script, "docker://nvcr.io#nvidia/x:1", str(out)], env=env, capture_output=True, text=True
    )
    log = [shlex.join(shlex.split(line)) for line in (tmp_path / "log").read_text().splitlines()]
    assert log == [
        f"enroot import --output {out} dockerd://darling-nemo:test",
        f"enroot import --output {out} 'docker://nvcr.io#nvidia/x:1'",
    ]
    for args, message in [
        (["img"], "usage"),
        (["img", str(tmp_path / "x.tar")], "must end in .sqsh"),
    ]:
        res = subprocess.run([script, *args], env=env, capture_output=True, text=True)
        assert res.returncode == 2 and message in res.stderr
    out.write_text("")
    res = subprocess.run([script, "img", str(out)], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "exists" in res.stderr
    res = subprocess.run(
        [script, "img", str(tmp_path / "y.sqsh")],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "enroot not found" in res.stderr


def run_verify(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, str(CONTAINERS / "verify_stack.py"), *args],
        capture_output=True,
        text=True,
        env=env,
    )


def test_verify_stack_versions():
    import pydantic

    ok = run_verify(f"pydantic=={pydantic.VERSION}", "pyyaml")
    assert ok.returncode == 0 and "ok  pydantic" in ok.stdout
    bad = run_verify("pydantic==0.0.1", "no-such-dist-xyz==1", "--python", "2.7")
    assert bad.returncode == 1
    assert "pydantic: " in bad.stderr and "pinned 0.0.1" in bad.stderr
    assert "no-such-dist-xyz: not installed" in bad.stderr and "python: " in bad.stderr


def test_verify_stack_satisfies_reads_requirements_and_extras(tmp_path):
    """A made-up installed distribution whose requirements are not all met."""
    info = tmp_path / "fakepkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n"
        "Requires-Dist: numpy<1\n"  # installed numpy is newer: unmet
        "Requires-Dist: pydantic>=2\n"  # met
        'Requires-Dist: no-such-dist-xyz; extra == "gpu"\n'  # only with [gpu]
        'Requires-Dist: fakepkg[gpu]; extra == "all"\n'  # self-reference: skipped
    )
    res = run_verify("--satisfies", "fakepkg", pythonpath=tmp_path)
    assert res.returncode == 1
    assert "fakepkg needs numpy<1" in res.stderr and "no-such-dist-xyz" not in res.stderr
    res = run_verify("--satisfies", "fakepkg[gpu]", pythonpath=tmp_path)
    assert "fakepkg needs no-such-dist-xyz" in res.stderr and "not installed" in res.stderr
    # darling-nemo's own extras are all met in the dev environment.
    assert run_verify("--satisfies", "darling-nemo[judges,eval]").returncode == 0


# ---------------------------------------------------------------------------------------------
# `uv run` in the image runs NeMo-RL's driver environment as installed
# ---------------------------------------------------------------------------------------------

# What NeMo-RL's release image sets for uv (its docker/Dockerfile; shared nemo-rl-v0.4.0.md),
# with the driver environment replaced by the stand-in below.
NEMO_RL_BASE_UV_ENV = {"UV_LINK_MODE": "copy"}
# A distribution NeMo-RL installs and darling-nemo does not declare: a sync to darling-nemo's
# resolution would remove it.
NEMO_RL_ONLY = ("nemo-rl-stand-in", "0.4.0", "nemo_rl_stand_in")


def dockerfile_env(dockerfile: Path) -> dict[str, str]:
    """Every NAME=VALUE of the Dockerfile's ENV instructions (continuation lines joined)."""
    logical = re.sub(r"\\\n", " ", dockerfile.read_text())
    env = {}
    for line in logical.splitlines():
        if re.match(r"^ENV\s", line):
            for word in shlex.split(line[4:]):
                name, sep, value = word.partition("=")
                assert sep, f"ENV {word}: only the NAME=VALUE form is read here"
                env[name] = value
    return env


def write_installed_distribution(venv: Path, name: str, version: str, module: str) -> None:
    """An installed distribution (dist-info with a RECORD, so that uv can uninstall it)."""
    purelib = Path(
        subprocess.run(
            [
                venv / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    info = purelib / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (purelib / module).mkdir()
    (purelib / module / "__init__.py").write_text('"""Stands for a package of NeMo-RL\'s."""\n')
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("uv\n")
    files = [f"{module}/__init__.py", *(f"{info.name}/{f}" for f in ("METADATA", "INSTALLER"))]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))


@pytest.fixture
def image_stand_in(tmp_path):
    """The image on CPU: a copy of the checkout where the Dockerfile puts it, a virtualenv
    standing for NeMo-RL's driver environment (darling-nemo's own dependencies, one package
    only NeMo-RL has, darling-nemo installed --no-deps --editable as the Dockerfile does),
    and the environment variables of NeMo-RL's image and of containers/Dockerfile.

    Offline: the stand-in's packages come from uv's cache by `uv sync --frozen --offline`
    against this checkout's uv.lock (which `uv run pytest` writes). `uv pip install
    --offline` cannot be used: it needs the package index pages, which a sync from the lock
    never fetched; and a --system-site-packages venv would see the base interpreter's
    packages, not the project environment's.
    """
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv not on PATH: the image's `uv run` cannot be simulated")
    lock = REPO / "uv.lock"
    if not lock.exists():
        pytest.fail(f"{lock} missing: run the tests with `uv run pytest`, which writes it")
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("UV_", "VIRTUAL_ENV", "PYTHONPATH")) or k == "UV_CACHE_DIR"
    }
    base["UV_OFFLINE"] = "1"

    # NeMo-RL's driver environment.
    venv = tmp_path / "nemo_rl_venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env=base, check=True)
    deps_project = tmp_path / "deps"
    deps_project.mkdir()
    for name in ("pyproject.toml", "README.md", "uv.lock"):
        shutil.copy(REPO / name, deps_project / name)
    subprocess.run(
        [uv, "sync", "-q", "--frozen", "--no-dev", "--no-install-project"],
        cwd=deps_project,
        env={**base, "UV_PROJECT_ENVIRONMENT": str(venv)},
        check=True,
        timeout=300,
    )
    write_installed_distribution(venv, *NEMO_RL_ONLY)

    # The checkout as COPY puts it in the image, installed as step 3 installs it.
    checkout = tmp_path / "opt" / "darling-nemo"
    checkout.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, checkout / name)
    for name in ("darling_nemo", "recipes", "conf"):
        shutil.copytree(REPO / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--no-deps",
            "--editable",
            str(checkout),
        ],
        env=base,
        check=True,
        timeout=300,
    )
    env = {**base, **NEMO_RL_BASE_UV_ENV, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env.update(dockerfile_env(CONTAINERS / "Dockerfile"))

    def freeze() -> list[str]:
        out = subprocess.run(
            [uv, "pip", "freeze", "--python", str(venv / "bin" / "python")],
            env=base,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.splitlines()

    return uv, venv, checkout, env, freeze


def test_uv_run_in_the_image_uses_nemo_rls_environment_as_installed(image_stand_in):
    uv, venv, checkout, env, freeze = image_stand_in
    before = freeze()
    assert f"{NEMO_RL_ONLY[0]}=={NEMO_RL_ONLY[1]}" in before
    assert any(line.startswith("-e file://") for line in before)

    def uv_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [uv, "run", *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=300
        )

    res = uv_run(
        "recipes/darling_math.py", "--config", "conf/math_qwen3_4b_darling.yaml", "--dry-run"
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert "engine: nemo_rl" in res.stdout
    where = uv_run(
        "python", "-c", "import shutil, sys; print(sys.prefix); print(shutil.which('darling-plan'))"
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(venv), str(venv / "bin" / "darling-plan")]
    plan_help = uv_run("darling-plan", "--help")
    assert plan_help.returncode == 0 and "usage: darling-plan" in plan_help.stdout, plan_help.stderr
    # Nothing synced, locked or created: the environment is exactly as NeMo-RL installed it.
    assert freeze() == before
    assert not (checkout / "uv.lock").exists() and not (checkout / ".venv").exists()

    # Without the Dockerfile's UV_NO_SYNC, that `uv run` would sync the environment to
    # darling-nemo's resolution: remove NeMo-RL's own package and install torch.
    plain = {k: v for k, v in env.items() if k != "UV_NO_SYNC"}
    would = subprocess.run(
        [uv, "sync", "--dry-run"],
        cwd=checkout,
        env=plain,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert would.returncode == 0, would.stderr
    assert f" - {NEMO_RL_ONLY[0]}=={NEMO_RL_ONLY[1]}" in would.stderr, would.stderr
    assert re.search(r"^ \+ torch==", would.stderr, re.M), would.stderr
    assert freeze() == before
