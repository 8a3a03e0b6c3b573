"""What of the driver's environment reaches Ray: variables by name, never a secret.

Ray keeps every runtime_env it is given in its GCS (its tables list a job's and an actor's
`env_vars`, and so do its state API, its dashboard and its agent's logs), and Ray 2.46 has
no authentication: whoever reaches the head's port reads them. So:

- the reward environment's actor gets the variables of `REWARD_ENV_VARS`, each for the
  reason given there (`reward_env_vars`), instead of the driver's whole environment;
- NeMo-RL's `init_ray` passes `dict(os.environ)` as the job's runtime_env, and its
  `RayWorkerGroup` (built in `setup()`) copies `os.environ` into every worker's (its own
  code, not changed here): `secrets_withheld` takes every secret variable
  (`auth.is_secret_name`: WANDB_API_KEY, HF_TOKEN, the judge's DARLING_JUDGE_TOKEN, any
  *_TOKEN, *API_KEY, *SECRET*) out of the environment while they run, and puts them back.
  wandb, which `setup()` starts first, gets its key in its settings instead
  (`hand_wandb_its_key`).

Where a secret is still needed: the judge's token only in the driver (the served judge is
the driver's, built after setup(); no Ray actor calls the classifier servers);
WANDB_API_KEY only in the driver's wandb. Ray's workers inherit the environment of the
raylet that starts them, and an actor that builds workers itself (the reward model's
environment) copies that: so Ray starts without the secrets too (slurm/common.sh's
`ray start`, the rehearsal's, and a Ray init_ray starts), and its workers find a gated
model's token where `hf auth login` writes it (HF_HOME/token, mode 0600); the cluster's
nodes read models from HF_HOME offline anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

from darling_nemo.judges.auth import is_secret_name

REWARD_ENV_VARS: dict[str, str] = {
    "HF_HOME": "the reward model's weights and tokenizer are cached there",
    "HF_HUB_CACHE": "the same when the hub cache is kept apart from HF_HOME",
    "HF_HUB_OFFLINE": "compute nodes are offline: read the cache, never the hub",
    "TRANSFORMERS_OFFLINE": "the same for transformers' own loaders",
    "HF_DATASETS_OFFLINE": "the same for datasets",
    "NEMO_RL_PY_EXECUTABLES_SYSTEM": "NeMo-RL's actors run on the driver's interpreter",
    "PYTHONPATH": "a checkout run in place (and the rehearsal's stand-ins) is importable",
    "DARLING_REHEARSAL_DIR": "a rehearsal's stand-ins keep their records there",
    "PYTHONUNBUFFERED": "the actor's lines reach the log as they are printed",
    "TOKENIZERS_PARALLELISM": "no tokenizer thread pool forked into Ray's workers",
    "OMP_NUM_THREADS": "the CPU threads each process may use",
}


def reward_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed variables that are set, for the reward environment's runtime_env."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in REWARD_ENV_VARS if name in env}


def hand_wandb_its_key(environ: Mapping[str, str] | None = None) -> None:
    """WANDB_API_KEY into wandb's settings (held in memory; wandb writes a key it was given
    so to no netrc), so that the variable can be withheld while NeMo-RL's setup() starts
    the wandb run and then builds its workers. Nothing without the key."""
    key = (os.environ if environ is None else environ).get("WANDB_API_KEY")
    if key:
        import wandb

        wandb.setup(settings=wandb.Settings(api_key=key))


@contextmanager
def secrets_withheld(environ: MutableMapping[str, str] | None = None) -> Iterator[list[str]]:
    """The secret variables out of the environment for the `with` block (NeMo-RL's
    init_ray); back afterwards, however the block ends. Yields their names."""
    env = os.environ if environ is None else environ
    held = {name: env.pop(name) for name in list(env) if is_secret_name(name)}
    try:
        yield sorted(held)
    finally:
        env.update(held)
