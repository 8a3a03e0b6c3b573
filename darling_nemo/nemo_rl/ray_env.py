"""What of the driver's environment reaches Ray: allow-listed variables, never a secret.

Ray keeps every runtime_env it is given in its GCS (its tables list a job's and an actor's
`env_vars`, and so do its state API, its dashboard and its agent's logs), and Ray 2.46 has
no authentication: whoever reaches the head's port reads them. A deny-list of secret-looking
names misses secrets under other names (`DATABASE_URL`, `GH_PAT`, `MYSQL_PWD`, a proxy URL
with a password), so what reaches Ray is an allow-list:

- the reward environment's actor gets the variables of `REWARD_ENV_VARS`, each for the
  reason given there (`reward_env_vars`), instead of the driver's whole environment;
- NeMo-RL's `init_ray` passes `dict(os.environ)` as the job's runtime_env, and its
  `RayWorkerGroup` (built in `setup()`) copies `os.environ` into every worker's (its own
  code, not changed here): `only_allowed_env` narrows the environment to the variables of
  `RAY_ENV_VARS` and `RAY_ENV_PREFIXES` (each with its reason) while they run, with any
  `user:password@` taken out of URL values, and puts everything back afterwards. A name
  that looks secret (`auth.is_secret_name`) never passes, even under an allowed prefix
  (HF_TOKEN, WANDB_API_KEY, the judge's DARLING_JUDGE_TOKEN). wandb, which `setup()` starts
  first, gets its key in its settings instead (`hand_wandb_its_key`).
- A user whose workers need another variable names it in DARLING_RAY_ENV_EXTRA (comma- or
  space-separated); a secret-looking name there is refused (ConfigError, one line).

Where a secret is still needed: the judge's token only in the driver (the served judge is
the driver's, built after setup(); no Ray actor calls the classifier servers), or through
the token file whose path DARLING_JUDGE_TOKEN_FILE gives (mode 0600; the path may reach Ray,
the token never does); WANDB_API_KEY only in the driver's wandb. Ray's workers inherit the
environment of the raylet that starts them, and an actor that builds workers itself (the
reward model's environment) copies that: so Ray starts with the allow-list too (the
rehearsal's `ray start`, and the head a one-node run starts where none runs:
`ray_head_without_dashboard`, its dashboard off), and its workers find a gated model's
token where `hf auth login` writes it (HF_HOME/token, mode 0600); the cluster's nodes read
models from HF_HOME offline anyway.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path

from darling_nemo.judges.auth import is_secret_name
from darling_nemo.judges.node_server import die_with_parent, stop_server
from darling_nemo.ports import NotReady, free_port, port_open, wait_until
from darling_nemo.schema import ConfigError

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

# The job's runtime_env and NeMo-RL's workers: variables by name (NeMo-RL v0.4.0's own reads
# are under the prefixes below: nemo_rl/distributed, nemo_rl/models, nemo_rl/utils/venvs.py).
RAY_ENV_VARS: dict[str, str] = {
    **REWARD_ENV_VARS,
    "PATH": "workers find the container's executables (nvidia-smi, uv, ninja)",
    "HOME": "caches that default under the home folder (torch, triton, hub token)",
    "USER": "libraries that name per-user temp folders and caches",
    "LOGNAME": "the same where USER is not set",
    "LANG": "the locale Python decodes files and subprocess output with",
    "LC_ALL": "the same, when the site overrides every locale category",
    "TZ": "log timestamps in the site's time zone",
    "TMPDIR": "Ray's and torch's temporary files where the site wants them",
    "LD_LIBRARY_PATH": "the container's CUDA, NCCL and cuDNN libraries load",
    "VIRTUAL_ENV": "the environment NeMo-RL's actors run in, when a venv is active",
    "PYTHONHASHSEED": "the same hashing in every process of a reproducible run",
    "MKL_NUM_THREADS": "the CPU threads each process may use (MKL's setting)",
    "TRANSFORMERS_CACHE": "the older transformers' cache folder, when a site sets it",
    "XDG_CACHE_HOME": "where caches go when the site moves them off HOME",
    "GLOO_SOCKET_IFNAME": "the network interface torch.distributed's gloo binds to",
    # Compute nodes rarely reach the internet; a site whose nodes do so through a proxy
    # keeps it, without the credentials (`strip_url_credentials`): a proxy that needs them
    # is configured in a file (a netrc of mode 0600) or left to the driver.
    "HTTP_PROXY": "a site's proxy to the hub (credentials stripped)",
    "HTTPS_PROXY": "the same for HTTPS (credentials stripped)",
    "NO_PROXY": "hosts reached directly, never through the proxy (localhost, the nodes)",
    "http_proxy": "HTTP_PROXY as curl and gRPC spell it (credentials stripped)",
    "https_proxy": "HTTPS_PROXY as curl and gRPC spell it (credentials stripped)",
    "no_proxy": "NO_PROXY as curl and gRPC spell it",
}

RAY_ENV_PREFIXES: dict[str, str] = {
    "CUDA_": "CUDA_VISIBLE_DEVICES (NeMo-RL's cluster tag) and the CUDA runtime's settings",
    "NCCL_": "NCCL's network and memory settings (NeMo-RL sets NCCL_CUMEM_ENABLE)",
    "NVTE_": "Transformer Engine's settings for the Megatron workers",
    "TORCH_": "torch.distributed's and torch.compile's settings",
    "PYTORCH_": "the CUDA caching allocator's settings (PYTORCH_CUDA_ALLOC_CONF)",
    "TORCHINDUCTOR_": "where torch.compile keeps its kernel cache",
    "TRITON_": "where triton keeps its compiled kernels",
    "NRL_": "NeMo-RL's own settings (NRL_REFIT_*, NRL_VLLM_*, NRL_MEGATRON_CHECKPOINT_DIR)",
    "NEMO_RL_": "NeMo-RL's interpreter choice and venv folder (NEMO_RL_VENV_DIR)",
    "VLLM_": "vLLM's settings, which NeMo-RL's generation workers read and set",
    "RAY_": "RAY_ADDRESS (init_ray attaches through it) and Ray's own settings",
    "HF_": "the hub's cache folders and offline switches (HF_TOKEN is a secret: refused)",
    "WANDB_": "setup() starts the driver's wandb run meanwhile (WANDB_API_KEY: refused)",
    "UV_": "NeMo-RL builds its workers' venvs with uv unless they use the system Python",
    "DARLING_": "this package's settings: the rehearsal's folder, the token FILE's path",
    "LC_": "the locale's categories (LC_CTYPE, LC_NUMERIC, ...)",
}

EXTRA_ENV = "DARLING_RAY_ENV_EXTRA"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `scheme://user:password@host`: the part up to the last @ before the path goes (a password
# may hold an unencoded @), the host stays (Ray keeps where a proxy is, not how to use it);
# proxies also accept a bare `user:password@host`, so their values lose that form too
_URL_USERINFO = re.compile(r"://[^\s/]*@")
_BARE_USERINFO = re.compile(r"^[^\s/]*@")


def strip_url_credentials(value: str, name: str = "") -> str:
    """`value` without the `user:password@` of any URL in it (`name`: the variable's, so
    that a proxy's bare form is stripped too)."""
    value = _URL_USERINFO.sub("://", value)
    return _BARE_USERINFO.sub("", value) if name.lower().endswith("proxy") else value


def extra_names(environ: Mapping[str, str]) -> list[str]:
    """The names DARLING_RAY_ENV_EXTRA adds to the allow-list; ConfigError (one line) for a
    name that looks secret or is no variable name."""
    names = [name for name in re.split(r"[,\s]+", environ.get(EXTRA_ENV, "")) if name]
    for name in names:
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{EXTRA_ENV}: {name!r} is not an environment variable's name")
        if is_secret_name(name):
            raise ConfigError(
                f"{EXTRA_ENV}: {name} looks like a secret, and Ray's tables are readable by "
                "whoever reaches its head: hand it to the workers in a file of mode 0600 instead"
            )
    return names


def allowed_name(name: str, extras: frozenset[str] = frozenset()) -> bool:
    """Whether a variable of this name may reach Ray (never one whose name looks secret)."""
    if is_secret_name(name):
        return False
    return (
        name in RAY_ENV_VARS
        or name in extras
        or any(name.startswith(prefix) for prefix in RAY_ENV_PREFIXES)
    )


def ray_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed variables that are set, URL credentials stripped: what Ray gets."""
    env = os.environ if environ is None else environ
    extras = frozenset(extra_names(env))
    return {
        name: strip_url_credentials(value, name)
        for name, value in env.items()
        if allowed_name(name, extras)
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
def only_allowed_env(environ: MutableMapping[str, str] | None = None) -> Iterator[list[str]]:
    """The environment narrowed to `ray_env_vars` for the `with` block (NeMo-RL's init_ray,
    setup()); everything back afterwards, however the block ends. Yields the names taken
    out. A variable the block itself sets stays (NeMo-RL sets some for its workers)."""
    env = os.environ if environ is None else environ
    kept = ray_env_vars(env)  # a refused extra name raises here, before anything changes
    held = {name: value for name, value in env.items() if name not in kept}
    changed = {name: env[name] for name, value in kept.items() if env[name] != value}
    for name in held:
        del env[name]
    env.update(kept)
    try:
        yield sorted(held)
    finally:
        env.update(held)
        env.update(changed)


RAY_HEAD_START_S = 120  # a loaded node starts a head in seconds; this only stops a hang


class RayStartError(RuntimeError):
    """The driver's own Ray head did not start (the message names its log)."""


def running_ray_address() -> str | None:
    """The Ray cluster NeMo-RL's init_ray would attach to (`ray.init(address="auto")`:
    RAY_ADDRESS, else one `ray start` left on this machine), None where there is none."""
    from ray._private.services import get_ray_address_from_environment  # what "auto" reads

    try:
        return get_ray_address_from_environment("auto", None)
    except ConnectionError:
        return None


@contextmanager
def ray_head_without_dashboard(log: Path) -> Iterator[str | None]:
    """Where no Ray cluster runs, a local head with its dashboard off, which NeMo-RL's
    init_ray attaches to through RAY_ADDRESS, stopped with the block (and with the driver:
    a parent-death signal); yields its address, or None where a cluster runs already.

    init_ray would otherwise start Ray inside the driver with its dashboard on, on
    127.0.0.1:8265, whose job API runs whatever any local user submits (Ray 2.46 has no
    authentication). The head starts with the allow-list (`ray_env_vars`): its workers
    inherit its environment."""
    if running_ray_address() is not None:
        yield None
        return
    port = free_port()  # a free port for the head's GCS (6379 may be taken)
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block"]
    command += [f"--port={port}", "--node-ip-address=127.0.0.1"]  # one node: this one
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        head = subprocess.Popen(
            command,
            env=ray_env_vars(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopped whole, raylet and workers too
            preexec_fn=die_with_parent,
        )
    address = f"127.0.0.1:{port}"
    os.environ["RAY_ADDRESS"] = address
    try:
        _wait_for_port(port, head, log)
        print(f"Ray: a head at {address} with its dashboard off (log: {log})", flush=True)
        yield address
    finally:
        os.environ.pop("RAY_ADDRESS", None)
        stop_server(head, 30)


def _wait_for_port(port: int, head: subprocess.Popen, log: Path) -> None:
    try:
        wait_until(lambda: port_open(port), RAY_HEAD_START_S, "ray start", head)
    except NotReady as err:
        if err.exit_status is not None:
            raise RayStartError(
                f"ray start exited with status {err.exit_status}; see {log}"
            ) from None
        raise RayStartError(
            f"ray start: no head on port {port} after {RAY_HEAD_START_S} s; see {log}"
        ) from None
