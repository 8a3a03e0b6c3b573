"""`ray start`'s environment in the jobs (slurm/common.sh's ray_env_args): Ray's workers
inherit it, and an actor that builds workers copies it into Ray's state, so it holds the
allow-list the driver gives Ray (darling_nemo/nemo_rl/ray_env.py) and no secret of any name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from helpers import REPO

from darling_nemo.nemo_rl.ray_env import RAY_ENV_PREFIXES, RAY_ENV_VARS, ray_env_vars


def common_sh_list(name: str) -> set[str]:
    text = (REPO / "slurm" / "common.sh").read_text()
    (value,) = re.findall(rf'^{name}="([^"]*)"', text, re.MULTILINE)
    return set(value.split())


def test_ray_start_allow_list_is_ray_env_pys():
    # `ray start`'s environment is what Ray's workers inherit: the driver's allow-list
    assert common_sh_list("RAY_ENV_NAMES") == set(RAY_ENV_VARS)
    assert common_sh_list("RAY_ENV_PREFIXES") == set(RAY_ENV_PREFIXES)


def test_ray_start_gets_the_allow_list_and_no_secret_of_any_name():
    env = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/someone",
        "DARLING_ROOT": str(REPO),
        "HF_HOME": "/shared/hf",
        "NRL_REFIT_NUM_BUFFERS": "2",
        "DARLING_JUDGE_TOKEN_FILE": "/run/job/judge_token",
        "HTTPS_PROXY": "http://user:pw-0123@proxy.site:3128",
        "https_proxy": "user:pw-0123@proxy.site:3128",
        "MY_SITE_SETTING": "on",
        "DARLING_RAY_ENV_EXTRA": "MY_SITE_SETTING",
        # secrets, under names a deny-list knows and under names it does not
        "HF_TOKEN": "hf_fake0123456789",
        "DARLING_JUDGE_TOKEN": "judge-fake-0123456789",
        "DATABASE_URL": "postgresql://app:db-pw@db.site/prod",
        "GH_PAT": "ghp_fake0123",
        "MYSQL_PWD": "pw-1",
    }
    script = (
        'set -euo pipefail; source "$DARLING_ROOT/slurm/common.sh"; ray_env_args; '
        'env "${RAY_ENV_ARGS[@]}" "$1" -c "import json, os; print(json.dumps(dict(os.environ)))"'
    )
    res = subprocess.run(
        ["bash", "-c", script, "bash", sys.executable],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(res.stdout)
    got.pop("LC_CTYPE", None)  # Python's own locale coercion (PEP 538), not the job's
    got.pop("_")  # bash's: the path of the command it ran (env)
    assert got == ray_env_vars(env)
