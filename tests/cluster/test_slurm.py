"""The slurm/*.sub scripts, run for real with bash against a fake SLURM.

SLURM's CLI cannot run here, so each test puts tiny stand-ins on PATH: `scontrol show
hostnames` expands a node list, `scontrol show job` names the submitted script, `getent`
resolves node names to 10.0.0.N, `squeue -o %L` reports the time left. In --dry-run the
scripts must print every srun / ray / python command and run none (the stand-in `srun`
fails the test if called). The last tests run without --dry-run against a stand-in `srun`
that plays the steps (Ray, the classifier servers, the driver) to check waiting, clean-up
and the exit code.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import REPO, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo import plan
from darling_nemo.config import load_config
from darling_nemo.nemo_rl.adapter import checkpoint_must_save_by, save_by_epoch
from darling_nemo.schema import ServedJudgeConfig, validate_darling

SLURM = REPO / "slurm"
IMAGE = "/images/darling-nemo.sqsh"
DRIVER_RECIPES = (
    "recipes/darling_wildchat.py",
    "recipes/darling_math.py",
    "recipes/darling_task.py",
)

FAKE_SCONTROL = r"""#!/usr/bin/env python3
import os, re, sys
args = sys.argv[1:]
if args[:2] == ["show", "hostnames"]:
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", args[2]):
        m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", part)
        if m:
            prefix, a, b = m.groups()
            for i in range(int(a), int(b) + 1):
                print(f"{prefix}{i:0{len(a)}d}")
        else:
            print(part)
elif args[:2] == ["show", "job"]:
    print(f"JobId={args[2]} JobName=x\n   Command={os.environ['FAKE_SUBMITTED']} WorkDir=/tmp")
elif args[:1] == ["requeue"]:
    open(os.environ["FAKE_LOG"], "a").write("requeue " + " ".join(args[1:]) + "\n")
elif args[:1] == ["update"]:
    open(os.environ["FAKE_LOG"], "a").write("update " + " ".join(args[1:]) + "\n")
else:
    sys.exit(f"fake scontrol: unsupported {args}")
"""

FAKE_GETENT = r"""#!/usr/bin/env bash
# getent ahostsv4 gpu-007 -> 10.0.0.7
[[ "$1" == ahostsv4 ]] || exit 2
n=$(echo "$2" | tr -dc '0-9' | sed 's/^0*//')
echo "10.0.0.${n:-0}   STREAM $2"
"""

FAKE_SQUEUE = """#!/usr/bin/env bash
echo "${FAKE_TIME_LEFT:-UNLIMITED}"
"""

# sinfo -h -o %G [-p PARTITION]: the partition's GRES ("(null)": none), and what it was asked.
FAKE_SINFO = """#!/usr/bin/env bash
echo "sinfo $*" >>"$FAKE_LOG.sinfo"
echo "${FAKE_GRES:-(null)}"
"""

# The real base64, and what it printed for the test to read: the job's token is made from it
# (slurm/common.sh: make_job_token, '+/' -> '-_', '=' dropped).
TOKEN_BASE64 = """#!/usr/bin/env bash
out=$(PATH=/usr/bin:/bin base64 "$@")
printf '%s\\n' "$out" >>"$TOKEN_SEEN"
printf '%s\\n' "$out"
"""

FAIL_SRUN = """#!/usr/bin/env bash
echo "srun called in a dry run: $*" >&2
exit 99
"""


@pytest.fixture
def cluster(tmp_path):
    """A fake SLURM on PATH, a results directory and the site values a job needs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [
        ("scontrol", FAKE_SCONTROL),
        ("getent", FAKE_GETENT),
        ("squeue", FAKE_SQUEUE),
        ("sinfo", FAKE_SINFO),
        ("srun", FAIL_SRUN),
        ("base64", TOKEN_BASE64),
    ]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for d in ("results", "data", "hf"):
        (tmp_path / d).mkdir()
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
        "DARLING_PYTHON": sys.executable,
        "FAKE_LOG": str(tmp_path / "fake.log"),
        "TOKEN_SEEN": str(tmp_path / "token_seen"),
        # site values
        "CONTAINER_IMAGE": IMAGE,
        "RESULTS_DIR": str(tmp_path / "results"),
        "DATA_DIR": str(tmp_path / "data"),
        "HF_HOME": str(tmp_path / "hf"),
        "CONTAINER_MOUNTS": "/lustre/scratch:/lustre/scratch",
        "GPU_MEMORY_GIB": "79.6",
        "WANDB_API_KEY": "wandb-secret-0123456789",
        "DARLING_SITE_ENV": str(tmp_path / "site.env"),
    }
    (tmp_path / "site.env").write_text("# empty site file: everything is in the environment\n")

    class Cluster:
        path = tmp_path
        bin = bin_dir

        def job(self, script: str, nodes: int, job_id: int = 4242, **extra: str) -> dict:
            """The environment of an sbatch allocation of `nodes` nodes named gpu-001..."""
            job_env = dict(env)
            job_env.update(
                SLURM_JOB_ID=str(job_id),
                SLURM_JOB_NAME=f"darling-{Path(script).stem}",
                SLURM_JOB_NODELIST=f"gpu-[001-{nodes:03d}]",
                SLURM_JOB_NUM_NODES=str(nodes),
                SLURM_GPUS_ON_NODE="8",
                SLURM_SUBMIT_DIR=str(REPO),
                SLURM_RESTART_COUNT="0",
                FAKE_SUBMITTED=str(SLURM / script),
            )
            job_env.update(extra)
            return job_env

        def run(self, script: str, env: dict, *args: str, timeout: int = 120):
            job = subprocess.Popen(
                ["bash", str(SLURM / script), *args],
                env=env,
                cwd=tmp_path,  # not the checkout: the script must find it itself
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its own process group: a hung job is killed whole
            )
            try:
                stdout, stderr = job.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                stdout, stderr = job.communicate()
                pytest.fail(f"{script} still running after {timeout}s:\n{stdout}\n{stderr}")
            return subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)

    return Cluster()


def commands(stdout: str) -> list[list[str]]:
    """The printed `+ cmd args` lines, as argv lists."""
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def srun_parts(argv: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """(srun --options, the -w node, the command run in the container)."""
    assert argv[0] == "srun", argv
    options, node, i = {}, "", 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-w":
            node, i = argv[i + 1], i + 2
        elif arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            options[key] = value
            i += 1
        else:
            break
    return options, node, argv[i:]


def by_role(stdout: str) -> dict[str, list[tuple[dict, str, list[str]]]]:
    roles: dict[str, list] = {}
    for argv in commands(stdout):
        if argv[0] != "srun":
            roles.setdefault(argv[0], []).append(argv)
            continue
        options, node, cmd = srun_parts(argv)
        text = " ".join(cmd)
        if "darling_nemo.plan" in text:
            role = "plan"
        elif "ray start --head" in text:
            role = "head"
        elif "ray start" in text:
            role = "worker"
        elif "ray status" in text:
            role = "status"
        elif "darling_nemo.serve_classifiers" in text:
            role = "classifiers"
        elif cmd[:2] == ["uv", "run"] and cmd[2] in DRIVER_RECIPES:
            role = "driver"
        else:
            raise AssertionError(f"unexpected command {argv}")
        roles.setdefault(role, []).append((options, node, cmd))
    return roles


def override(cmd: list[str], key: str) -> str | None:
    values = [a.split("=", 1)[1] for a in cmd if a.startswith(key + "=")]
    assert len(values) <= 1, values
    return values[0] if values else None


def assert_recipe_accepts(driver_cmd: list[str]) -> None:
    """Run the driver's command line through the real recipe's --dry-run (no NeMo-RL needed)."""
    assert driver_cmd[:2] == ["uv", "run"]  # in the image: NeMo-RL's environment, never synced
    res = run_python(*driver_cmd[2:], "--dry-run", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def job_tokens(cluster) -> list[str]:
    """The tokens the jobs run so far made (what the fake base64 printed for them)."""
    seen = cluster.path / "token_seen"
    lines = seen.read_text().split() if seen.exists() else []
    return [line.translate(str.maketrans("+/", "-_")).rstrip("=") for line in lines]


def assert_servers_check_the_token(cluster, res, bind: str | None = None) -> None:
    """The job made a token and shows it nowhere; its classifier servers listen on their
    node's address (or `bind`, the site's), never 0.0.0.0 unless asked, and each vLLM server
    command (darling-serve-classifiers' own dry run of the job's command) has the token's
    --middleware; Ray's dashboard is off."""
    text = res.stdout + res.stderr
    (token,) = job_tokens(cluster)
    assert len(token) >= 40 and token not in text
    assert "DARLING_JUDGE_TOKEN=" not in text
    assert ("0.0.0.0" in text) == (bind == "0.0.0.0")
    roles = by_role(res.stdout)
    for _, _, head in roles.get("head", []):
        assert "--include-dashboard=false" in head
    for _, _, ray in roles.get("head", []) + roles.get("worker", []):
        # Ray's workers inherit `ray start`'s environment: no secret in it
        start = ray.index("ray")
        assert ray[0] == "env" and ray[1:start].count("-u") >= 2, ray
        assert {"WANDB_API_KEY", "DARLING_JUDGE_TOKEN"} <= set(ray[1:start]), ray
        assert "HF_HOME" not in ray[1:start], ray  # allow-listed: kept
    ((_, node, cmd),) = roles["classifiers"]
    host = bind or f"10.0.0.{int(node[-3:])}"
    assert f"host={host}" in cmd
    servers = run_python(*cmd[1:], "--dry-run", timeout=300)
    assert servers.returncode == 0, servers.stderr
    lines = [line for line in servers.stdout.splitlines() if " vllm serve " in line]
    assert lines and all(
        f"--host {host} " in line
        and "--middleware darling_nemo.judges.auth.BearerTokenAuth" in line
        for line in lines
    ), lines


def driver_overrides(cmd: list[str]) -> list[str]:
    i = cmd.index("--config")
    return cmd[i + 2 :]


# ---------------------------------------------------------------------------------------------
# Dry runs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "step_gres", "expected"),
    [
        # The partition schedules GPUs as GRES: every step asks for the node's 8.
        ("gpu:h100:8(S:0-1)\ngpu:h100:8(S:0-1)", None, "gpu:8"),
        # No GRES on the partition: no --gres (an unknown GRES would make srun fail).
        ("(null)", None, None),
        # The site says: never, or exactly this.
        ("gpu:8", "none", None),
        ("(null)", "gpu:h100:4", "gpu:h100:4"),
    ],
    ids=["gres", "no_gres", "forced_off", "forced_spec"],
)
def test_every_step_asks_for_the_gpus_when_the_partition_has_gpu_gres(
    cluster, reported, step_gres, expected
):
    extra = {"FAKE_GRES": reported, "SLURM_JOB_PARTITION": "batch"}
    if step_gres:
        extra["STEP_GRES"] = step_gres
    env = cluster.job("llama8b_wildchat.sub", nodes=3, **extra)
    res = cluster.run("llama8b_wildchat.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    sruns = [srun_parts(a)[0] for a in commands(res.stdout) if a[0] == "srun"]
    assert len(sruns) == 6  # plan, classifiers, Ray head + 1 worker, ray status, driver
    assert [opts.get("gres") for opts in sruns] == [expected] * 6
    if step_gres is None:  # auto asked sinfo about the job's partition
        asked = (cluster.path / "fake.log.sinfo").read_text().split()
        assert asked[asked.index("-p") + 1] == "batch" and "%G" in asked


def test_llama70b_dry_run_composes_the_whole_job(cluster):
    env = cluster.job("llama70b_wildchat.sub", nodes=6, FAKE_TIME_LEFT="1-00:00:00")
    before = int(time.time())
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run")
    after = int(time.time())
    assert res.returncode == 0, res.stderr
    out = res.stdout
    roles = by_role(out)

    # The memory plan ran (here, since this is a dry run) and printed its verdict.
    assert "Verdict:" in out and "DOES NOT FIT" not in out
    ((_, plan_node, plan_cmd),) = roles["plan"]
    assert plan_node == "gpu-001" and "--check" in plan_cmd
    assert plan_cmd[:4] == [
        "python",
        "-m",
        "darling_nemo.plan",
        "conf/wildchat_llama70b_darling.yaml",
    ]

    # Ray: head on the first node, a worker on each of the next 4 (cluster.num_nodes = 5:
    # 4 policy nodes + the reward model node), 8 GPUs each, joined at the head's address.
    ((head_opts, head_node, head_cmd),) = roles["head"]
    assert head_node == "gpu-001"
    assert "--node-ip-address=10.0.0.1" in head_cmd and "--port=6379" in head_cmd
    workers = roles["worker"]
    assert [node for _, node, _ in workers] == ["gpu-002", "gpu-003", "gpu-004", "gpu-005"]
    for opts, _, cmd in [(head_opts, head_node, head_cmd), *workers]:
        assert "--num-gpus=8" in cmd and "--block" in cmd
        assert opts["nodes"] == "1" and opts["ntasks"] == "1"
    for _, node, cmd in workers:
        assert "--address=10.0.0.1:6379" in cmd
        assert f"--node-ip-address=10.0.0.{int(node[-3:])}" in cmd
    assert_servers_check_the_token(cluster, res)

    # Containers: one image, the site mounts, the checkout's place in the image, per-job
    # container names (no state shared between jobs or restarts).
    every_srun = [srun_parts(a) for a in commands(out) if a[0] == "srun"]
    for opts, _, _ in every_srun:
        assert opts["container-image"] == IMAGE
        assert opts["container-workdir"] == "/opt/darling-nemo"
        mounts = opts["container-mounts"].split(",")
        assert f"{env['RESULTS_DIR']}:{env['RESULTS_DIR']}" in mounts
        assert f"{env['DATA_DIR']}:/opt/darling-nemo/data" in mounts
        assert f"{env['HF_HOME']}:{env['HF_HOME']}" in mounts
        assert "/lustre/scratch:/lustre/scratch" in mounts
        assert opts["container-name"].startswith("darling-4242-r0-")
        assert "no-container-mount-home" in opts
    assert head_opts["container-name"] == "darling-4242-r0-head"

    # Classifiers: their own node (the 6th), 8 GPUs, ports 8000-8007.
    ((_, clf_node, clf_cmd),) = roles["classifiers"]
    assert clf_node == "gpu-006"
    assert "model=dogtooth/similarity-classifier-f168-hf" in clf_cmd
    assert "gpus=[0,1,2,3,4,5,6,7]" in clf_cmd and "base_port=8000" in clf_cmd
    assert "advertise_host=gpu-006" in clf_cmd

    # The driver: on the head node, in the head container, the recipe with its config.
    ((drv_opts, drv_node, drv_cmd),) = roles["driver"]
    assert drv_node == "gpu-001" and drv_opts["container-name"] == "darling-4242-r0-head"
    exported = dict(kv.split("=", 1) for kv in drv_opts["export"].split(",")[1:])
    assert drv_opts["export"].startswith("ALL,")
    assert exported["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert drv_cmd[:5] == [
        "uv",
        "run",
        "recipes/darling_wildchat.py",
        "--config",
        "conf/wildchat_llama70b_darling.yaml",
    ]
    endpoints = [f"http://gpu-006:{8000 + k}" for k in range(8)]
    assert override(drv_cmd, "darling.judge.endpoints") == "[" + ",".join(endpoints) + "]"
    run_dir = f"{env['RESULTS_DIR']}/darling-llama70b_wildchat-4242"
    assert override(drv_cmd, "checkpointing.checkpoint_dir") == f"{run_dir}/checkpoints"
    assert override(drv_cmd, "logger.log_dir") == f"{run_dir}/logs"
    # The job's end (now + the 24 h squeue reports) and the 20 min margin go to the driver,
    # which sets NeMo-RL's deadline when grpo_train starts; the launcher sets none itself.
    end = int(exported["DARLING_JOB_END_EPOCH"])
    assert before + 86400 <= end <= after + 86400
    assert exported["DARLING_SAVE_MARGIN_S"] == "1200"
    assert override(drv_cmd, "checkpointing.checkpoint_must_save_by") is None
    save_by = save_by_epoch(exported["DARLING_JOB_END_EPOCH"], exported["DARLING_SAVE_MARGIN_S"])
    # grpo_train starting right away: 24 h - 20 min; after a 30 min setup: 23 h 10 min.
    assert checkpoint_must_save_by(save_by, now=end - 86400) == "00:23:40:00"
    assert checkpoint_must_save_by(save_by, now=end - 86400 + 1800) == "00:23:10:00"
    assert override(drv_cmd, "logger.wandb_enabled") == "true"
    # The key reaches the containers through the environment, never the log.
    assert env["WANDB_API_KEY"] not in out + res.stderr
    assert "WANDB_API_KEY=<set, hidden>" in out

    # Every override the launcher adds is a valid key of the config (strict loading), and
    # the endpoints are what the served judge's schema reads.
    cfg = load_config(REPO / "conf/wildchat_llama70b_darling.yaml", driver_overrides(drv_cmd))
    judge = validate_darling(cfg["darling"]).judge
    assert isinstance(judge, ServedJudgeConfig)
    assert [e.url for e in judge.endpoints] == endpoints

    # The recipe itself accepts the composed command line (its --dry-run validates the
    # config, the overrides and the darling: section against NeMo-RL's keys).
    assert_recipe_accepts(drv_cmd)

    # Order: plan, classifiers, Ray head, workers, status, driver.
    order = [a[-1] if a[0] != "srun" else " ".join(srun_parts(a)[2][:3]) for a in commands(out)]
    assert order[0].startswith("python -m darling_nemo.plan")
    assert order[-1].startswith("uv run recipes/darling_wildchat.py")
    assert not (cluster.path / "fake.log").exists()  # nothing was requeued


def test_sbatch_header_matches_each_job_config(cluster):
    """#SBATCH --nodes = cluster.num_nodes of the job's config + 1 classifier node."""
    for script, config in [
        ("llama70b_wildchat.sub", "conf/wildchat_llama70b_darling.yaml"),
        ("llama8b_wildchat.sub", "conf/wildchat_llama8b_darling.yaml"),
        ("qwen3_4b_math.sub", "conf/math_qwen3_4b_darling.yaml"),
    ]:
        text = (SLURM / script).read_text()
        assert f"JOB_CONFIG={config}" in text
        header_nodes = int(re.search(r"^#SBATCH --nodes=(\d+)$", text, re.M).group(1))
        cfg = load_config(REPO / config)
        assert header_nodes == cfg["cluster"]["num_nodes"] + 1, script
        assert plan.read_layout(cfg).darling.judge.kind == "served"


def test_no_site_values_in_the_scripts():
    for path in [*SLURM.glob("*.sub"), *SLURM.glob("*.sh")]:
        text = path.read_text()
        assert not re.search(r"^#SBATCH\s+(-A|-p|--account|--partition)\b", text, re.M), path
        assert "/lustre" not in text and "nvcr.io" not in text, path


@pytest.mark.parametrize(
    ("script", "nodes", "recipe", "config", "classifier", "workers"),
    [
        (
            "llama8b_wildchat.sub",
            3,
            "recipes/darling_wildchat.py",
            "conf/wildchat_llama8b_darling.yaml",
            "dogtooth/similarity-classifier-f168-hf",
            1,
        ),
        (
            "qwen3_4b_math.sub",
            9,
            "recipes/darling_math.py",
            "conf/math_qwen3_4b_darling.yaml",
            "dogtooth/qwen3-4b-emb-finetuned-step-70-hf",
            7,
        ),
    ],
)
def test_other_jobs_dry_run(cluster, script, nodes, recipe, config, classifier, workers):
    env = cluster.job(script, nodes=nodes)
    res = cluster.run(script, env, "--dry-run")
    assert res.returncode == 0, res.stderr
    roles = by_role(res.stdout)
    assert len(roles["worker"]) == workers
    ((_, clf_node, clf_cmd),) = roles["classifiers"]
    assert clf_node == f"gpu-{nodes:03d}" and f"model={classifier}" in clf_cmd
    ((_, _, drv_cmd),) = roles["driver"]
    assert drv_cmd[2:5] == [recipe, "--config", config]
    assert override(drv_cmd, "darling.judge.endpoints").startswith(f"[http://gpu-{nodes:03d}:8000,")
    # No time limit reported: no save deadline.
    assert override(drv_cmd, "checkpointing.checkpoint_must_save_by") is None
    assert "DARLING_JOB_END_EPOCH" not in roles["driver"][0][0]["export"]
    assert "no time limit reported by squeue: no save deadline" in res.stdout
    assert_recipe_accepts(drv_cmd)
    assert_servers_check_the_token(cluster, res)


def test_dry_run_without_an_allocation_pretends_nodes(cluster):
    env = {
        k: v
        for k, v in cluster.job("llama8b_wildchat.sub", 3).items()
        if not k.startswith("SLURM_")
    }
    env["DARLING_ROOT"] = str(REPO)
    res = cluster.run("llama8b_wildchat.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    roles = by_role(res.stdout)
    assert roles["head"][0][1] == "node001" and roles["classifiers"][0][1] == "node003"
    assert "pretending nodes node001 node002 node003" in res.stdout


def test_grpo_baseline_with_external_classifiers(cluster):
    """CONFIG switches the recipe config; CLASSIFIER_ENDPOINTS (a serve_classifiers job)
    replaces the classifier node; user overrides reach the plan and the driver."""
    env = cluster.job(
        "llama70b_wildchat.sub",
        nodes=5,
        CONFIG="conf/wildchat_llama70b_grpo.yaml",
        CLASSIFIER_ENDPOINTS="http://gpu-100:8000,http://gpu-100:8001",
        RUN_NAME="grpo70b",
        WANDB_API_KEY="",
    )
    # the servers' token: the serve_classifiers job's file, named by the site
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run", "grpo.max_num_steps=7")
    assert res.returncode == 2 and "DARLING_JUDGE_TOKEN_FILE is not set: the token file" in (
        res.stderr
    )
    env["DARLING_JUDGE_TOKEN_FILE"] = "/shared/classifiers/judge_token"
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run", "grpo.max_num_steps=7")
    assert res.returncode == 0, res.stderr
    assert job_tokens(cluster) == []  # no token of its own: its servers are another job's
    roles = by_role(res.stdout)
    assert "classifiers" not in roles
    ((_, _, plan_cmd),) = roles["plan"]
    assert "grpo.max_num_steps=7" in plan_cmd
    ((_, _, drv_cmd),) = roles["driver"]
    assert drv_cmd[4] == "conf/wildchat_llama70b_grpo.yaml"
    assert override(drv_cmd, "grpo.max_num_steps") == "7"
    assert (
        override(drv_cmd, "darling.judge.endpoints") == "[http://gpu-100:8000,http://gpu-100:8001]"
    )
    assert override(drv_cmd, "logger.wandb_enabled") is None
    assert (
        override(drv_cmd, "checkpointing.checkpoint_dir")
        == f"{env['RESULTS_DIR']}/grpo70b/checkpoints"
    )
    assert_recipe_accepts(drv_cmd)


def test_lexical_judge_needs_no_classifiers(cluster):
    env = cluster.job("llama8b_wildchat.sub", nodes=2)
    res = cluster.run("llama8b_wildchat.sub", env, "--dry-run", "darling.judge={kind: lexical}")
    assert res.returncode == 0, res.stderr
    roles = by_role(res.stdout)
    assert "classifiers" not in roles
    assert override(roles["driver"][0][2], "darling.judge.endpoints") is None


def test_user_task_job_dry_runs_without_classifiers(cluster):
    # a user's reward functions (recipes/darling_task.py) on one node, the lexical judge
    text = (SLURM / "code_tests.sub").read_text()
    config = "conf/code_tests_qwen3_1p7b_darling.yaml"
    assert f"JOB_CONFIG={config}" in text
    header_nodes = int(re.search(r"^#SBATCH --nodes=(\d+)$", text, re.M).group(1))
    assert header_nodes == load_config(REPO / config)["cluster"]["num_nodes"]
    env = cluster.job("code_tests.sub", nodes=header_nodes)
    res = cluster.run("code_tests.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    roles = by_role(res.stdout)
    assert "classifiers" not in roles
    ((_, _, drv_cmd),) = roles["driver"]
    assert drv_cmd[2:5] == ["recipes/darling_task.py", "--config", config]
    assert_recipe_accepts(drv_cmd)  # its config phase calls the reward functions once


def test_classifiers_on_spare_gpus_of_a_one_node_run(cluster):
    env = cluster.job("qwen3_4b_math.sub", nodes=1, CLASSIFIER_PLACEMENT="gpus")
    overrides = ["cluster.num_nodes=1", "cluster.gpus_per_node=6", "grpo.num_prompts_per_step=24"]
    res = cluster.run("qwen3_4b_math.sub", env, "--dry-run", *overrides)
    assert res.returncode == 0, res.stderr
    roles = by_role(res.stdout)
    ((_, node, head_cmd),) = roles["head"]
    assert head_cmd[0] == "env" and "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5" in head_cmd
    assert "--num-gpus=6" in head_cmd and "worker" not in roles
    ((_, clf_node, clf_cmd),) = roles["classifiers"]
    assert clf_node == node == "gpu-001" and "gpus=[6,7]" in clf_cmd


def test_resume_reports_the_newest_checkpoint(cluster):
    env = cluster.job("llama8b_wildchat.sub", nodes=3, RUN_NAME="run_a", SLURM_RESTART_COUNT="2")
    ckpt = Path(env["RESULTS_DIR"]) / "run_a" / "checkpoints"
    for step in ("step_9", "step_100", "step_20", "tmp_step_150"):
        (ckpt / step).mkdir(parents=True)
    res = cluster.run("llama8b_wildchat.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"resuming from {ckpt}/step_100 (restart 2)" in res.stdout
    roles = by_role(res.stdout)
    assert roles["head"][0][0]["container-name"] == "darling-4242-r2-head"
    assert override(roles["driver"][0][2], "checkpointing.checkpoint_dir") == str(ckpt)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"CONTAINER_IMAGE": ""}, "CONTAINER_IMAGE is not set"),
        ({"RESULTS_DIR": ""}, "RESULTS_DIR is not set"),
        (
            {"SLURM_JOB_NODELIST": "gpu-[001-005]", "SLURM_JOB_NUM_NODES": "5"},
            "needs 6 nodes (cluster.num_nodes=5 + 1 classifier node; judge served, classifiers node)",
        ),
        ({"SLURM_JOB_NUM_NODES": "7"}, "SLURM_JOB_NUM_NODES=7 but the node list has 6 nodes"),
        ({"CONFIG": "conf/nope.yaml"}, "CONFIG=conf/nope.yaml: no such file"),
        ({"DARLING_SITE_ENV": "/nonexistent/site.env"}, "DARLING_SITE_ENV=/nonexistent/site.env"),
        (
            {
                "CLASSIFIER_PLACEMENT": "gpus",
                "SLURM_JOB_NODELIST": "gpu-[001-005]",
                "SLURM_JOB_NUM_NODES": "5",
            },
            "CLASSIFIER_PLACEMENT=gpus needs cluster.num_nodes=1",
        ),
        ({"GPUS_PER_NODE": "4"}, "cluster.gpus_per_node=8 but the nodes have 4 GPUs"),
        (
            {"NRL_MEGATRON_CHECKPOINT_DIR": "mcore"},
            "NRL_MEGATRON_CHECKPOINT_DIR=mcore: must be an absolute path on a shared filesystem",
        ),
        (
            {"NRL_MEGATRON_CHECKPOINT_DIR": "/shared/a,b"},
            "NRL_MEGATRON_CHECKPOINT_DIR=/shared/a,b: no ',' or ':'",
        ),
    ],
)
def test_clear_errors(cluster, change, message):
    env = cluster.job("llama70b_wildchat.sub", nodes=6)
    env.update(change)
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run")
    assert res.returncode != 0
    assert message in res.stderr
    assert not any(a[-1:] == ["--block"] for a in commands(res.stdout)), "Ray started anyway"


def test_a_config_that_does_not_fit_stops_before_launch(cluster):
    env = cluster.job("llama70b_wildchat.sub", nodes=6)
    no_parallelism = [
        "policy.megatron_cfg.tensor_model_parallel_size=1",
        "policy.megatron_cfg.pipeline_model_parallel_size=1",
        "policy.megatron_cfg.sequence_parallel=false",
    ]
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run", *no_parallelism)
    assert res.returncode != 0
    assert "DOES NOT FIT" in res.stdout and "memory plan failed" in res.stderr
    assert set(by_role(res.stdout)) == {"plan"}
    # DARLING_SKIP_PLAN=1: printed, not enforced.
    env["DARLING_SKIP_PLAN"] = "1"
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run", *no_parallelism)
    assert res.returncode == 0, res.stderr
    assert "DOES NOT FIT" in res.stdout and "driver" in by_role(res.stdout)


def test_serve_classifiers_dry_run_is_accepted_by_darling_serve_classifiers(cluster):
    env = cluster.job(
        "serve_classifiers.sub", nodes=1, CLASSIFIER_MODEL="/models/clf", CLASSIFIER_GPUS="4"
    )
    res = cluster.run("serve_classifiers.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    ((opts, node, cmd),) = by_role(res.stdout)["classifiers"]
    assert node == "gpu-001" and opts["container-image"] == IMAGE
    assert (
        "CLASSIFIER_ENDPOINTS=http://gpu-001:8000,http://gpu-001:8001,http://gpu-001:8002,http://gpu-001:8003"
        in res.stdout
    )
    # The real darling-serve-classifiers accepts exactly these arguments.
    check = run_python(*cmd[1:], "--dry-run", timeout=300)
    assert check.returncode == 0, check.stderr
    assert check.stdout.count("--task classify") == 4
    assert_servers_check_the_token(cluster, res)
    # training jobs get the servers' token from a file only its user reads (never its value)
    token_file = f"{env['RESULTS_DIR']}/classifiers-4242/slurm/4242-r0/judge_token"
    assert f"DARLING_JUDGE_TOKEN_FILE={token_file}" in res.stdout
    assert f"the servers' token would be written to {token_file} (mode 0600)" in res.stdout
    # a site that asks for every interface gets it
    env["CLASSIFIER_BIND_HOST"] = "0.0.0.0"
    (cluster.path / "token_seen").unlink()
    res = cluster.run("serve_classifiers.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert_servers_check_the_token(cluster, res, bind="0.0.0.0")
    del env["CLASSIFIER_MODEL"]
    res = cluster.run("serve_classifiers.sub", env, "--dry-run")
    assert res.returncode != 0 and "CLASSIFIER_MODEL is not set" in res.stderr


def test_unknown_option_is_refused(cluster):
    res = cluster.run("llama8b_wildchat.sub", cluster.job("llama8b_wildchat.sub", 3), "--dryrun")
    assert res.returncode != 0 and "unknown option --dryrun" in res.stderr


@pytest.mark.parametrize(
    ("site_dir", "mounted"),
    [
        (None, False),  # default RESULTS_DIR/megatron_checkpoints: inside the RESULTS_DIR mount
        ("{tmp}/mcore", True),  # elsewhere: mounted at the same path in every container
        ("/lustre/scratch/mcore", False),  # under a CONTAINER_MOUNTS destination already
    ],
    ids=["default", "own_mount", "under_a_site_mount"],
)
def test_every_step_gets_the_shared_megatron_checkpoint_dir(cluster, site_dir, mounted):
    """NeMo-RL writes the HF->Megatron conversion to NRL_MEGATRON_CHECKPOINT_DIR, else
    HF_HOME/nemo_rl, else ~/.cache: neither of the last two is shared by the containers."""
    env = cluster.job("llama70b_wildchat.sub", nodes=6)
    expected = f"{env['RESULTS_DIR']}/megatron_checkpoints"
    if site_dir:
        expected = site_dir.format(tmp=cluster.path)
        env["NRL_MEGATRON_CHECKPOINT_DIR"] = expected
    res = cluster.run("llama70b_wildchat.sub", env, "--dry-run")
    assert res.returncode == 0, res.stderr
    sruns = [srun_parts(a)[0] for a in commands(res.stdout) if a[0] == "srun"]
    assert len(sruns) == 9  # plan, classifiers, Ray head + 4 workers, ray status, driver
    for opts in sruns:
        exported = opts["export"].split(",")
        assert exported[0] == "ALL" and f"NRL_MEGATRON_CHECKPOINT_DIR={expected}" in exported
        mounts = opts["container-mounts"].split(",")
        assert (f"{expected}:{expected}" in mounts) == mounted, mounts
    assert (
        "darling: HF->Megatron conversion (once per model, read by every node): "
        f"NRL_MEGATRON_CHECKPOINT_DIR={expected}"
    ) in res.stdout.splitlines()
    assert not Path(expected).exists()  # a dry run creates nothing


# ---------------------------------------------------------------------------------------------
# Dry runs rehearse the driver's command line where NeMo-RL imports
# ---------------------------------------------------------------------------------------------

# Stands for DARLING_PYTHON: records each call (working directory, then argv), answers
# `-c "import nemo_rl"` as FAKE_NEMO_RL says, runs the memory plan and the recipe's --dry-run
# with the real Python, and ends a rehearsal as FAKE_REHEARSAL says (the recipes' contract: exit 0 only with
# `rehearsal: PASS` last, else nonzero with `rehearsal: FAIL at <phase>: <error>`).
FAKE_PYTHON = r"""#!/usr/bin/env bash
{ printf '%q ' "$PWD" "$@"; echo; } >>"$FAKE_PY_LOG"
if [[ "$1" == -c && "$2" == "import nemo_rl" ]]; then
  [[ "$FAKE_NEMO_RL" == 1 ]] && exit 0
  echo "Traceback (most recent call last):" >&2
  echo "ModuleNotFoundError: No module named 'nemo_rl'" >&2
  exit 1
fi
[[ "$1" == -m ]] && exec "$REAL_PYTHON" "$@"
[[ "${*: -1}" == --dry-run ]] && exec "$REAL_PYTHON" "$@"
if [[ " $* " == *" --rehearse "* ]]; then
  echo "rehearsal: config, plan and local classifier server ok"
  case "$FAKE_REHEARSAL" in
    pass) echo "rehearsal: PASS" && exit 0 ;;
    fail) echo "rehearsal: FAIL at generation: vLLM could not start" && exit 1 ;;
    no_pass_line) echo "rehearsal: done" && exit 0 ;;
  esac
fi
echo "fake python: unexpected call $*" >&2
exit 98
"""


@pytest.mark.parametrize(
    ("nemo_rl", "ending", "message"),
    [
        ("0", "pass", None),
        ("1", "pass", "darling: rehearsal passed"),
        (
            "1",
            "fail",
            "rehearsal failed (exit status 1): rehearsal: FAIL at generation: vLLM could not start",
        ),
        ("1", "no_pass_line", "rehearsal failed (exit status 0): rehearsal: done"),
    ],
    ids=["no_nemo_rl", "pass", "fail", "exit_0_without_pass"],
)
def test_dry_run_rehearses_the_drivers_command_line_where_nemo_rl_imports(
    cluster, nemo_rl, ending, message
):
    fake = cluster.bin / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = cluster.path / "python-calls"
    env = cluster.job(
        "qwen3_4b_math.sub",
        nodes=9,
        DARLING_PYTHON=str(fake),
        REAL_PYTHON=sys.executable,
        FAKE_PY_LOG=str(calls),
        FAKE_NEMO_RL=nemo_rl,
        FAKE_REHEARSAL=ending,
    )
    res = cluster.run("qwen3_4b_math.sub", env, "--dry-run", "grpo.max_num_steps=3")
    recorded = [shlex.split(line) for line in calls.read_text().splitlines()]
    assert {cwd for cwd, *_ in recorded} == {str(REPO)}  # recipes/... is relative to the checkout
    argvs = [argv for _, *argv in recorded]
    assert argvs[0][:2] == ["-m", "darling_nemo.plan"]  # the memory plan first
    assert argvs[1] == ["-c", "import nemo_rl"]
    rehearsals = argvs[2:]
    if nemo_rl == "0":
        # no rehearsal: the recipe's own dry run of the driver's config and overrides instead
        assert res.returncode == 0, res.stderr
        ((_, _, drv_cmd),) = by_role(res.stdout)["driver"]
        assert rehearsals == [[*drv_cmd[2:], "--dry-run"]]
        assert [
            line for line in res.stdout.splitlines() if line.startswith("darling: rehears")
        ] == [
            f"darling: rehearsal skipped: DARLING_PYTHON={fake} cannot import nemo_rl"
            " (ModuleNotFoundError: No module named 'nemo_rl'); run the dry run in the"
            " container to rehearse"
        ]
        return
    # Exactly the driver's recipe, config and overrides, the served endpoints included (the
    # rehearsal replaces them with its own local server).
    ((_, _, drv_cmd),) = by_role(res.stdout)["driver"]
    assert drv_cmd[:5] == [
        "uv",
        "run",
        "recipes/darling_math.py",
        "--config",
        "conf/math_qwen3_4b_darling.yaml",
    ]
    assert rehearsals == [
        [
            "recipes/darling_math.py",
            "--config",
            "conf/math_qwen3_4b_darling.yaml",
            "--rehearse",
            *driver_overrides(drv_cmd),
        ]
    ]
    assert "grpo.max_num_steps=3" in rehearsals[0]
    assert override(rehearsals[0], "darling.judge.endpoints").startswith("[http://gpu-009:8000,")
    assert "rehearsal: config, plan and local classifier server ok" in res.stdout
    if ending == "pass":
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[-1] == message
    else:
        assert res.returncode != 0
        assert f"darling: error: {message}" in res.stderr


def test_site_example_env_sources_under_set_u_without_user(cluster):
    me = pwd.getpwuid(os.getuid()).pw_name
    example = SLURM / "site.example.env"
    read = 'set -euo pipefail; set -a; source "$1"; set +a; echo "$RESULTS_DIR $DATA_DIR"'
    for user, expected in [(None, me), ("alice", "alice")]:
        env = {"PATH": os.environ["PATH"], **({"USER": user} if user else {})}
        res = subprocess.run(
            ["bash", "-c", read, "_", str(example)], env=env, capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == [
            f"/shared/{expected}/darling-results",
            f"/shared/{expected}/darling-data",
        ]
    # The jobs read it under `set -u` as well (the job's environment has no USER).
    job = cluster.job("llama8b_wildchat.sub", nodes=3, DARLING_SITE_ENV=str(example))
    assert "USER" not in job
    res = cluster.run("llama8b_wildchat.sub", job, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"darling: site values from {example}" in res.stdout
    assert f"logs in /shared/{me}/darling-results/darling-llama8b_wildchat-4242/" in res.stdout


# ---------------------------------------------------------------------------------------------
# Not a dry run: a stand-in srun plays the steps
# ---------------------------------------------------------------------------------------------

PLAY_SRUN = textwrap.dedent(
    r"""
    #!/usr/bin/env python3
    # Stand-in for srun inside an allocation: parse the options, play the container command.
    import os, re, signal, subprocess, sys, time
    args = sys.argv[1:]
    out, i = None, 0
    while i < len(args):
        if args[i] == "-w":
            i += 2
        elif args[i].startswith("--"):
            if args[i].startswith("--output="):
                out = args[i].split("=", 1)[1]
            if args[i].startswith("--export="):  # ALL,NAME=VALUE,...: the step's environment
                names = args[i].split("=", 1)[1].split(",")
                if names[0] != "ALL":
                    sys.exit(f"--export without ALL drops the job's environment: {args[i]}")
                os.environ.update(pair.split("=", 1) for pair in names[1:])
            i += 1
        else:
            break
    cmd = args[i:]
    with open(os.environ["FAKE_LOG"] + ".env", "a") as seen:
        megatron = os.environ.get("NRL_MEGATRON_CHECKPOINT_DIR", "<unset>")
        seen.write(f"{' '.join(cmd[:3])} NRL_MEGATRON_CHECKPOINT_DIR={megatron}\n")

    def batch_shell():
        # The outermost ancestor running the .sub: what --signal=B: signals.
        pid, found = os.getpid(), None
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if len(argv) > 1 and argv[1].endswith(b".sub"):  # bash .../x.sub
                found = pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        return found

    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(" ".join(cmd) + "\n")
    text = " ".join(cmd)
    sink = open(out, "w") if out else sys.stdout
    if "darling_nemo.plan" in text:  # run it for real, in the checkout (the container's workdir)
        sys.exit(subprocess.call([sys.executable, *cmd[1:]], stdout=sink, stderr=subprocess.STDOUT,
                                 cwd=os.environ["FAKE_CONTAINER_WORKDIR"]))
    if "ray status" in text:
        sink.write("Resources\n Usage:\n 0.0/128.0 CPU\n 0.0/%s GPU\n" % os.environ["FAKE_RAY_GPUS"])
        sys.exit(0)
    if "serve_classifiers" in text:
        endpoints = [a.split("=", 1)[1] for a in cmd if a.startswith("endpoints_file=")][0]
        open(endpoints, "w").write("endpoints: []\n")
        os.execvp("sleep", ["sleep", "300"])
    if "ray start" in text:
        os.execvp("sleep", ["sleep", "300"])
    if "recipes/" in text:  # NeMo-RL's driver: leaves step_N checkpoints, prints, exits
        env = os.environ
        ckpt = [a.split("=", 1)[1] for a in cmd if a.startswith("checkpointing.checkpoint_dir=")][0]
        for step in env.get("FAKE_DRIVER_STEPS", "").split():
            os.makedirs(f"{ckpt}/step_{step}", exist_ok=True)
        sink.write(env.get("FAKE_DRIVER_SAYS", "") + "\n")
        sink.flush()
        time.sleep(float(env.get("FAKE_DRIVER_SECONDS", "0.5")))
        rc = int(env["FAKE_DRIVER_RC"])
        with open(env["FAKE_LOG"], "a") as log:
            log.write(f"driver exits {rc}\n")
        if env.get("FAKE_DRIVER_USR1_AT_EXIT") == "1":
            os.kill(batch_shell(), signal.SIGUSR1)
        sys.exit(rc)
    sys.exit(f"unexpected command {cmd}")
    """
).lstrip()


@pytest.mark.parametrize("driver_rc", [0, 7])
def test_real_mode_waits_cleans_up_and_propagates_the_exit_code(cluster, driver_rc):
    (cluster.bin / "srun").write_text(PLAY_SRUN)
    env = cluster.job(
        "llama8b_wildchat.sub",
        nodes=3,
        FAKE_RAY_GPUS="16.0",  # 2 Ray nodes x 8
        FAKE_DRIVER_RC=str(driver_rc),
        FAKE_CONTAINER_WORKDIR=str(REPO),
        POLL_S="0.2",
    )
    res = cluster.run("llama8b_wildchat.sub", env)
    assert res.returncode == driver_rc, res.stdout + res.stderr
    assert f"driver exited with {driver_rc}" in res.stdout
    log_lines = (cluster.path / "fake.log").read_text().splitlines()
    assert log_lines[-1] == f"driver exits {driver_rc}"  # and nothing requeued
    played = log_lines[:-1]
    roles = ("plan", "serve_classifiers", "ray status", "--head", "--address", "recipes/")
    kinds = [next(k for k in roles if k in line) for line in played]
    # plan, classifiers, head and the one worker (both in the background: either may log
    # first), status polls until 16 GPUs, the driver.
    assert kinds[:2] == ["plan", "serve_classifiers"]
    assert sorted(kinds[2:4]) == ["--address", "--head"]
    assert kinds[4:-1] and set(kinds[4:-1]) == {"ray status"}
    assert kinds[-1] == "recipes/"
    log_dir = Path(env["RESULTS_DIR"]) / "darling-llama8b_wildchat-4242" / "slurm" / "4242-r0"
    assert "CFG_NUM_NODES=2" in (log_dir / "layout.env").read_text()
    # Every step saw the shared HF->Megatron conversion directory, which now exists.
    megatron = Path(env["RESULTS_DIR"]) / "megatron_checkpoints"
    seen = (cluster.path / "fake.log.env").read_text().splitlines()
    assert len(seen) == len(played)  # one line per step, the driver included
    assert all(line.endswith(f" NRL_MEGATRON_CHECKPOINT_DIR={megatron}") for line in seen), seen
    assert megatron.is_dir()
    assert "Verdict:" in (log_dir / "plan.log").read_text()
    # The background steps (Ray, classifier servers: `sleep 300` here) were stopped.
    leftover = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True)
    mine = [pid for pid in leftover.stdout.split() if _environ_has(pid, env["FAKE_LOG"])]
    assert mine == []


def _environ_has(pid: str, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def test_real_mode_fails_fast_when_ray_never_comes_up(cluster):
    (cluster.bin / "srun").write_text(PLAY_SRUN)
    env = cluster.job(
        "llama8b_wildchat.sub",
        nodes=3,
        FAKE_RAY_GPUS="8.0",  # a worker never joined
        FAKE_DRIVER_RC="0",
        FAKE_CONTAINER_WORKDIR=str(REPO),
        POLL_S="0.2",
        RAY_START_TIMEOUT_S="2",
    )
    res = cluster.run("llama8b_wildchat.sub", env)
    assert res.returncode != 0
    assert "Ray has 8 of 16 GPUs" in res.stderr
    assert "recipes/" not in (cluster.path / "fake.log").read_text()


# ---------------------------------------------------------------------------------------------
# Save deadline and requeue
# ---------------------------------------------------------------------------------------------

TIMEOUT_LINE = "Timeout has been reached, stopping training early"  # grpo_train, v0.4.0


def nemo_rl_seconds(deadline: str) -> int:
    """NeMo-RL v0.4.0's reading of checkpoint_must_save_by (utils/timer.convert_to_seconds)."""
    days, hours, minutes, seconds = map(int, deadline.split(":"))
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def test_save_deadline_counts_from_the_start_of_grpo_train():
    # Job ends at t=100000; margin 1200 s -> save by 98800.
    save_by = save_by_epoch("100000", "1200")
    assert save_by == 98800
    # grpo_train starts at t=10000: 88800 s = 1 d (86400) + 40 min (2400) left.
    assert checkpoint_must_save_by(save_by, now=10000) == "01:00:40:00"
    # 1 h 2 min 3 s before the save-by time.
    assert checkpoint_must_save_by(save_by, now=98800 - 3723) == "00:01:02:03"
    # Setup ran past the save-by time: save after the first step and stop.
    assert checkpoint_must_save_by(save_by, now=99000) == "00:00:00:00"
    # A deadline the config sets itself wins when earlier: 1 h < 88800 s; not when later.
    assert checkpoint_must_save_by(save_by, 10000, configured="00:01:00:00") == "00:01:00:00"
    assert checkpoint_must_save_by(save_by, 10000, configured="02:00:00:00") == "01:00:40:00"
    # Outside the launcher (or no time limit): no deadline.
    assert save_by_epoch(None, None) is None and save_by_epoch("", "1200") is None


@pytest.mark.parametrize(
    ("end", "margin", "name"),
    [("soon", "1200", "DARLING_JOB_END_EPOCH"), ("100000", None, "DARLING_SAVE_MARGIN_S")],
)
def test_save_deadline_refuses_bad_environment(end, margin, name):
    with pytest.raises(ValueError, match=name):
        save_by_epoch(end, margin)


@settings(max_examples=200, deadline=None)
@given(
    save_by=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    now=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_save_deadline_reads_back_as_the_whole_seconds_left(save_by, now):
    deadline = checkpoint_must_save_by(save_by, now)
    assert re.fullmatch(r"\d{2,}:\d{2}:\d{2}:\d{2}", deadline)
    assert nemo_rl_seconds(deadline) == max(0, int(save_by - now))


@pytest.mark.nemo_rl
def test_nemo_rl_timeout_checker_reads_the_deadline():
    timer = pytest.importorskip("nemo_rl.utils.timer")
    checker = timer.TimeoutChecker(checkpoint_must_save_by(98800, now=10000))
    assert checker.last_save_time == 88800 and not checker.check_save()
    assert timer.TimeoutChecker(checkpoint_must_save_by(98800, now=99000)).check_save()


def played_job(cluster, **extra: str) -> dict:
    """A 3-node llama8b job whose stand-in srun plays every step; the driver as `extra` says."""
    (cluster.bin / "srun").write_text(PLAY_SRUN)
    return cluster.job(
        "llama8b_wildchat.sub",
        nodes=3,
        FAKE_RAY_GPUS="16.0",
        FAKE_CONTAINER_WORKDIR=str(REPO),
        FAKE_TIME_LEFT="4:00:00",
        POLL_S="0.2",
        **extra,
    )


def fake_log(cluster) -> list[str]:
    return (cluster.path / "fake.log").read_text().splitlines()


def checkpoints(env: dict) -> Path:
    return Path(env["RESULTS_DIR"]) / "darling-llama8b_wildchat-4242" / "checkpoints"


def test_a_run_stopped_at_the_save_deadline_requeues_after_the_driver_exits(cluster):
    # grpo_train returned at its deadline after saving step_3 of 10; the driver exits 0.
    env = played_job(
        cluster, FAKE_DRIVER_RC="0", FAKE_DRIVER_STEPS="2 3", FAKE_DRIVER_SAYS=TIMEOUT_LINE
    )
    res = cluster.run("llama8b_wildchat.sub", env, "grpo.max_num_steps=10")
    assert res.returncode == 0, res.stdout + res.stderr
    assert fake_log(cluster)[-2:] == ["driver exits 0", "requeue 4242"]
    assert "stopped at the save deadline at step 3 of 10: requeueing job 4242" in res.stdout


@pytest.mark.parametrize(
    ("says", "steps", "before", "message"),
    [
        # Finished: grpo_train reached grpo.max_num_steps.
        ("Max number of steps has been reached, stopping training early", "10", "", None),
        # The deadline came at the last step: nothing left to do.
        (TIMEOUT_LINE, "9 10", "", "the save deadline came at the last step (10 of 10)"),
        # The deadline came but no new checkpoint since the start: requeueing would loop.
        (TIMEOUT_LINE, "", "4", "no checkpoint newer than step 4 exists; not requeueing"),
    ],
    ids=["finished", "deadline_at_last_step", "no_progress"],
)
def test_no_requeue_when_training_is_done_or_made_no_progress(
    cluster, says, steps, before, message
):
    env = played_job(cluster, FAKE_DRIVER_RC="0", FAKE_DRIVER_STEPS=steps, FAKE_DRIVER_SAYS=says)
    for step in before.split():
        (checkpoints(env) / f"step_{step}").mkdir(parents=True)
    res = cluster.run("llama8b_wildchat.sub", env, "grpo.max_num_steps=10")
    assert res.returncode == 0, res.stdout + res.stderr
    assert fake_log(cluster)[-1] == "driver exits 0"
    assert not any(line.startswith("requeue") for line in fake_log(cluster))
    if message:
        assert message in res.stdout


def test_a_failed_driver_is_not_requeued_and_its_code_is_the_jobs(cluster):
    env = played_job(
        cluster, FAKE_DRIVER_RC="7", FAKE_DRIVER_STEPS="3", FAKE_DRIVER_SAYS=TIMEOUT_LINE
    )
    res = cluster.run("llama8b_wildchat.sub", env, "grpo.max_num_steps=10")
    assert res.returncode == 7, res.stdout + res.stderr
    assert fake_log(cluster)[-1] == "driver exits 7"
    assert "requeue" not in (cluster.path / "fake.log").read_text()


def test_usr1_during_the_driver_waits_for_it_then_requeues(cluster):
    """SLURM's time-limit warning (--signal=B:USR1@600) while NeMo-RL still saves: the job
    neither requeues nor returns until the driver exits, then requeues."""
    env = played_job(
        cluster,
        FAKE_DRIVER_RC="0",
        FAKE_DRIVER_STEPS="3",
        FAKE_DRIVER_SAYS=TIMEOUT_LINE,
        FAKE_DRIVER_SECONDS="3",
    )
    job = subprocess.Popen(
        ["bash", str(SLURM / "llama8b_wildchat.sub"), "grpo.max_num_steps=10"],
        env=env,
        cwd=cluster.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = cluster.path / "fake.log"
        for _ in range(600):  # until the driver runs (the plan takes a few seconds)
            if log.exists() and "recipes/" in log.read_text():
                break
            assert job.poll() is None, job.communicate()
            time.sleep(0.1)
        time.sleep(0.3)
        job.send_signal(signal.SIGUSR1)
        stdout, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 0, stdout + stderr
    assert "time limit in about 10 minutes (USR1)" in stdout
    assert fake_log(cluster)[-2:] == ["driver exits 0", "requeue 4242"]
    assert "driver exited with 0 after the time-limit signal" in stdout


def test_usr1_as_the_driver_exits_keeps_the_drivers_exit_code(cluster):
    # The signal lands while the driver exits: `wait` returns 138 and the driver is gone
    # before the launcher looks again; the job must still report the driver's 7.
    env = played_job(
        cluster,
        FAKE_DRIVER_RC="7",
        FAKE_DRIVER_SECONDS="0.2",
        FAKE_DRIVER_USR1_AT_EXIT="1",
    )
    res = cluster.run("llama8b_wildchat.sub", env)
    assert res.returncode == 7, res.stdout + res.stderr
    assert "driver exited with 7" in res.stdout
    assert "requeue" not in (cluster.path / "fake.log").read_text()


# 200 children that signal the launcher and exit at once, while another step (a `sleep`)
# runs: a status lost by `wait` shows as -1, or as a hang until that step ends. Bash 5.2 lost
# it in about 1 run in 50 with the `wait`-only loop this replaced, so 200 runs catch it.
RACE_RUNS = r"""
set -euo pipefail
source "$DARLING_ROOT/slurm/common.sh"
trap on_usr1 USR1
sleep 600 >/dev/null 2>&1 &
other_step=$!
for ((i = 0; i < 200; i++)); do
  delay=(0 0.002 0.005)
  status=0
  run_to_the_end "$STATUS_DIR/rc" bash -c 'sleep "$1"; kill -USR1 "$2"; exit 7' _ \
    "${delay[i % 3]}" $$ >/dev/null || status=$?
  echo "status $status"
done
kill "$other_step"
echo "USR1_RECEIVED=$USR1_RECEIVED"
"""


def test_run_to_the_end_keeps_the_status_when_usr1_lands_as_the_step_exits(tmp_path):
    job = subprocess.Popen(
        ["bash", "-c", RACE_RUNS],
        env={**os.environ, "DARLING_ROOT": str(REPO), "STATUS_DIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = job.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        pytest.fail(f"run_to_the_end hung:\n{job.communicate()[0][-2000:]}")
    statuses = [line for line in out.splitlines() if line.startswith("status ")]
    assert job.returncode == 0, out[-2000:]
    assert statuses == ["status 7"] * 200, sorted(set(statuses))
    assert "USR1_RECEIVED=1" in out


# ---------------------------------------------------------------------------------------------
# NoveltyBench evaluation job
# ---------------------------------------------------------------------------------------------


def test_eval_noveltybench_dry_run_generates_then_scores_on_one_node(cluster):
    from darling_nemo.evals.schema import NoveltyBenchConfig
    from darling_nemo.schema import validate_section

    env = cluster.job(
        "eval_noveltybench.sub", nodes=1, MODEL="/ckpt/run/step_200/", GPUS_PER_ENGINE="2"
    )
    res = cluster.run("eval_noveltybench.sub", env, "--dry-run", "max_prompts=5")
    assert res.returncode == 0, res.stderr
    steps = [srun_parts(argv) for argv in commands(res.stdout)]
    assert len(steps) == 2  # generate, then score; nothing else is started
    (gen_opts, gen_node, gen_cmd), (score_opts, score_node, score_cmd) = steps
    assert gen_node == score_node == "gpu-001"
    assert gen_opts["container-name"] != score_opts["container-name"]
    out = cluster.path / "results/eval/step_200/noveltybench"  # EVAL_NAME: the MODEL folder
    for cmd, stage, gpus in ((gen_cmd, "generate", "0,1"), (score_cmd, "score", "0,1,2,3,4,5,6,7")):
        # env VAR=... uv run recipe --config YAML overrides: generation on the engine's 2
        # GPUs, scoring on all 8 (the 27B reward model is spread with device_map=auto).
        assert cmd[:2] == ["env", f"CUDA_VISIBLE_DEVICES={gpus}"]
        assert "DARLING_DATA_DIR=/opt/darling-nemo/data" in cmd
        recipe = cmd.index("uv")
        assert cmd[recipe : recipe + 5] == [
            "uv",
            "run",
            "recipes/eval_noveltybench.py",
            "--config",
            "conf/eval/noveltybench.yaml",
        ]
        overrides = cmd[recipe + 5 :]
        assert override(cmd, "stage") == stage and overrides[-1] == "max_prompts=5"
        assert override(cmd, "output_dir") == str(out)
        # The real config loader and schema accept the command line.
        cfg = validate_section(
            NoveltyBenchConfig, load_config(REPO / "conf/eval/noveltybench.yaml", overrides)
        )
        assert (cfg.stage, cfg.run_name, cfg.max_prompts) == (stage, "step_200", 5)
        assert cfg.generator.model == "/ckpt/run/step_200/"
        assert (cfg.generator.backend, cfg.generator.tensor_parallel_size) == ("vllm", 2)
    assert f"{out}/summary.json" in res.stdout

    bad = cluster.run("eval_noveltybench.sub", {**env, "GPUS_PER_ENGINE": "16"}, "--dry-run")
    assert bad.returncode != 0 and "GPUS_PER_ENGINE=16 must be a number from 1 to" in bad.stderr
    env.pop("MODEL")
    missing = cluster.run("eval_noveltybench.sub", env, "--dry-run")
    assert missing.returncode != 0 and "MODEL is not set" in missing.stderr


# ---------------------------------------------------------------------------------------------
# SMOKE=1: the recipe's --smoke on the job's own nodes, in its own folder, briefly
# ---------------------------------------------------------------------------------------------

TRAINING_JOBS = [  # (.sub, its nodes, the smoke's time limit)
    ("qwen3_4b_math.sub", 9, "01:30:00"),
    ("llama8b_wildchat.sub", 3, "01:30:00"),
    ("llama70b_wildchat.sub", 6, "03:00:00"),  # the 70B .sub's own SMOKE_TIME_LIMIT
]


@pytest.mark.parametrize(("script", "nodes", "limit"), TRAINING_JOBS)
def test_smoke_dry_run_of_every_training_job(cluster, script, nodes, limit):
    env = cluster.job(script, nodes=nodes, SMOKE="1")
    res = cluster.run(script, env, "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    roles = by_role(res.stdout)
    run_dir = Path(env["RESULTS_DIR"]) / f"darling-{Path(script).stem}-4242"
    smoke_dir = run_dir / "smoke" / "4242-r0"
    # the job lowers its own time limit and is never requeued
    assert roles["scontrol"] == [
        ["scontrol", "update", "JobId=4242", f"TimeLimit={limit}", "Requeue=0"]
    ]
    # the job's own node count: the same Ray workers as the real job
    assert len(roles["head"]) == 1
    ((_, _, drv_cmd),) = roles["driver"]
    i = drv_cmd.index("--smoke")
    assert drv_cmd[i : i + 3] == ["--smoke", "--smoke-dir", str(smoke_dir)]
    assert override(drv_cmd, "checkpointing.checkpoint_dir") == f"{smoke_dir}/checkpoints"
    assert override(drv_cmd, "logger.log_dir") == f"{smoke_dir}/logs"
    assert override(drv_cmd, "logger.wandb.name") == f"darling-{Path(script).stem}-4242-smoke"
    assert f"{run_dir}/checkpoints" not in res.stdout.replace(
        f"(the run's checkpoints in {run_dir}/checkpoints are not touched)", ""
    )
    # the rest of the command is the job's: the recipe accepts it (its dry run, no --smoke)
    assert_recipe_accepts(drv_cmd[:i] + drv_cmd[i + 3 :])


def test_smoke_real_mode_runs_the_smoke_and_never_requeues(cluster):
    env = played_job(cluster, SMOKE="1", FAKE_DRIVER_RC="0", FAKE_DRIVER_STEPS="2 3")
    run_dir = Path(env["RESULTS_DIR"]) / "darling-llama8b_wildchat-4242"
    (run_dir / "checkpoints" / "step_40").mkdir(parents=True)  # the real run's: untouched
    res = cluster.run("llama8b_wildchat.sub", env)
    assert res.returncode == 0, res.stdout + res.stderr
    log = fake_log(cluster)
    assert log[0] == "update JobId=4242 TimeLimit=01:30:00 Requeue=0"
    assert log[-1] == "driver exits 0" and not any(line.startswith("requeue") for line in log)
    assert f"smoke report: {run_dir}/smoke/4242-r0/smoke_report.txt" in res.stdout
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_40"]


@pytest.mark.parametrize(
    ("script", "extra", "message"),
    [
        ("eval_math.sub", {"SMOKE": "1"}, "SMOKE=1 is for the training jobs"),
        ("llama8b_wildchat.sub", {"SMOKE": "yes"}, "SMOKE=yes: expected 0 or 1"),
        (
            "llama8b_wildchat.sub",
            {"SMOKE": "1", "SMOKE_TIME_LIMIT": "90"},
            "SMOKE_TIME_LIMIT=90: expected [D-]HH:MM:SS",
        ),
    ],
    ids=["not_a_training_job", "bad_value", "bad_time_limit"],
)
def test_smoke_refusals_name_the_variable(cluster, script, extra, message):
    env = cluster.job(script, nodes=3, **extra)
    res = cluster.run(script, env, "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr
