"""`recipes/darling_*.py --config X --rehearse`: NeMo-RL v0.4.0's whole run, on this CPU.

What runs for real: the recipe itself (a child process per phase, with the user's config
and overrides plus the shrink overrides of shrink.py), NeMo-RL's setup() and grpo_train(),
RayVirtualCluster on a private Ray with fake GPUs, Policy/VllmGeneration/RayWorkerGroup
(sharding, sequence packing), refit, MathEnvironment or RewardModelEnvironment, NeMo-RL's
loss, validation, CheckpointManager, logger and dataloader-state resume, the DARLING hook
and judge (a served judge talks to a classify_server on 127.0.0.1). Stood in for: the GPU
worker classes (standins.py). Phases:
  run 1 -- setup, training step 1, validation (when the config validates), checkpoint, stop
  run 2 -- resume from that checkpoint (weights checked bit for bit), step 2, checkpoint
Prints what it shrank, each phase with PASS/FAIL, and last `rehearsal: PASS` or
`rehearsal: FAIL at <phase>: <error>`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from darling_nemo import tasks
from darling_nemo.config import load_config, save_config
from darling_nemo.judges import auth
from darling_nemo.judges.registry import judge_kind
from darling_nemo.judges.serve_flags import caching_args
from darling_nemo.nemo_rl.judging_plan import judging_plan
from darling_nemo.nemo_rl.ray_env import ray_env_vars
from darling_nemo.ports import free_port, port_open, wait_until
from darling_nemo.rehearsal.contract import contract_phase
from darling_nemo.rehearsal.phases import (
    REHEARSAL_PROB_ERROR_TOLERANCE,
    Expect,
    RehearsalFailure,
    check,
    logged_scalars,
    newest_run_scalars,
    verify_run,
)
from darling_nemo.rehearsal.secrets_check import Planted, check_no_secrets, plant_secrets
from darling_nemo.rehearsal.shrink import lookup, shrink_overrides, shrunk_cluster
from darling_nemo.resources import resource_path
from darling_nemo.schema import validate_darling

__all__ = ["RehearsalFailure", "logged_scalars", "rehearse", "run_phase"]

REPO = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "site"
PHASE_TIMEOUT_S = 900


@dataclass
class Rehearsal:
    recipe: Path
    config_path: str
    overrides: list[str]
    task: str
    workdir: Path
    ray_address: str = ""  # set once the private Ray is up
    # the judge server's token, as a job makes one (or the one given to the rehearsal)
    token: str = field(default_factory=lambda: auth.job_token() or auth.new_token())
    # secrets under names no deny-list knows, in every process's environment: the secrets
    # phase looks for them (secrets_check.py)
    planted: list[Planted] = field(default_factory=plant_secrets)

    @property
    def env(self) -> dict[str, str]:
        """Every process of the rehearsal: the stand-in swap on PYTHONPATH (sitecustomize),
        offline hubs, NeMo-RL's actors on this interpreter, the private Ray."""
        env = dict(os.environ)
        if self.ray_address:
            env["RAY_ADDRESS"] = self.ray_address
        env.update(
            PYTHONPATH=os.pathsep.join(
                [str(SITE), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            DARLING_REHEARSAL_DIR=str(self.workdir),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            NEMO_RL_PY_EXECUTABLES_SYSTEM="1",
            RAY_USAGE_STATS_ENABLED="0",
            # Ray starts one idle Python worker per logical CPU, and the rehearsal declares
            # many more CPUs than the machine has (see start_ray): start workers on demand.
            RAY_enable_worker_prestart="0",
            RAY_prestart_worker_first_driver="0",
            TOKENIZERS_PARALLELISM="false",
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        env[auth.TOKEN_ENV] = self.token  # in the environment only: never a command line
        env.update({secret.name: secret.value for secret in self.planted})
        return env


@contextmanager
def _process_group(cmd: list[str], env: dict[str, str], log: Path):
    """A child in its own session; on exit its whole process group is stopped (it and only
    what it started: Ray's daemons and workers, or the classifier server)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait_s)
                time.sleep(0.5)  # let the group's other members take the signal too
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the group still alive


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def prompts_file(task: str, out: Path, count: int, overlong: int) -> Path:
    """The rehearsal's prompts in NeMo-RL's ResponseDataset format (darling-prep-* output):
    the `count` shortest of the task's shipped prompts, then the `overlong` longest, which
    exceed the shrunk prompt length on purpose (NeMo-RL masks them out; DARLING must leave
    them out of the partition). One over-long prompt in 8 keeps every step of 2 prompts with
    at least one real group."""
    nemo_rl = tasks.task(task).nemo_rl
    assert nemo_rl is not None, f"the {task} task does not run on NeMo-RL"
    data = resource_path(nemo_rl.rehearsal_data)
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    items = [nemo_rl.rehearsal_row(r) for r in rows]
    items.sort(key=lambda r: len(r["input"].split()))
    chosen = items[:count] + (items[-overlong:] if overlong else [])
    with out.open("w") as handle:
        for k, item in enumerate(chosen):
            handle.write(json.dumps({**item, "task_name": task, "id": f"rehearsal-{k}"}) + "\n")
    return out


def rehearsal_prompts(
    r: Rehearsal, cfg: dict[str, Any], name: str, count: int, overlong: int
) -> str:
    """The data file a rehearsal's phase reads: a task trained from the config's task:
    section brings its own prompts, as they are (its data_path where it reads one; else
    the config's data path stays, which such a run does not read); a shipped task's come
    from `prompts_file`."""
    section = cfg.get("task")
    if section is not None:
        source = section.get("data_path") or cfg["data"]["train_data_path"]
        return str(Path(source).resolve()) if source else str(r.workdir / name)
    return str(prompts_file(r.task, r.workdir / name, count, overlong))


def prepare(r: Rehearsal, judge_url: str | None) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Tiny models, prompts, the shrunk config (written to the work folder); prints what
    shrank. Returns (shrunk config file, the config as given, the shrunk config)."""
    from darling_nemo.rehearsal import models

    cfg = load_config(r.config_path, r.overrides)
    policy = models.save_tiny_policy(r.workdir / "policy", cfg["policy"]["model_name"], 1024)
    rm = None
    if cfg["env"]["reward_model"]["enabled"]:
        rm = models.save_tiny_reward_model(
            r.workdir / "reward_model", cfg["env"]["reward_model"]["model_name"], 1024
        )
    judge = validate_darling(cfg["darling"]).judge  # the schema fills the template's default
    classifier = None
    template = judge_kind(judge).stand_in.classifier_template
    if template is not None:
        classifier = models.save_tiny_pair_classifier(r.workdir / "classifier", template(judge))
    changes = shrink_overrides(
        cfg,
        policy_dir=str(policy),
        reward_model_dir=str(rm) if rm else None,
        train_data=rehearsal_prompts(r, cfg, "train.jsonl", 7, 1),
        val_data=rehearsal_prompts(r, cfg, "val.jsonl", 2, 0),
        workdir=str(r.workdir),
        judge_url=judge_url,
        classifier_dir=str(classifier) if classifier else None,
    )
    for key, value in changes:
        print(f"  shrink {key}: {lookup(cfg, key)!r} -> {value!r}", flush=True)
    shrunk = load_config(
        r.config_path,
        [*r.overrides, *(f"{key}={json.dumps(value)}" for key, value in changes)],
    )
    path = r.workdir / "rehearsal_config.yaml"
    save_config(shrunk, path)
    return path, cfg, shrunk


def run_phase(r: Rehearsal, name: str, config: Path, steps: int, log: Path) -> str:
    """One recipe run as the user starts it (a fresh process), up to grpo.max_num_steps."""
    # the log's last error line: a refusal that spans lines names its endpoint below its first
    return run_recipe_once(r.recipe, config, steps, r.env, log, name, PHASE_TIMEOUT_S, False)


def run_recipe_once(
    recipe: Path,
    config: Path,
    steps: int,
    env: dict[str, str],
    log: Path,
    phase: str,
    timeout: float | None,
    refusal_first: bool = True,
) -> str:
    """One recipe run as the user starts it, up to grpo.max_num_steps=steps; its log text.
    A failed run raises RehearsalFailure with the recipe's own refusal line where it made
    one and `refusal_first`, else the log's last error line."""
    cmd = [sys.executable, str(recipe), "--config", str(config), f"grpo.max_num_steps={steps}"]
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                cmd,
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RehearsalFailure(phase, f"no result after {timeout:.0f} s (log: {log})") from None
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        # the recipe's own one-line refusal (`darling_math: ...`, exit 2) where it made one
        refusals = [line for line in text.splitlines() if line.startswith(f"{recipe.stem}: ")]
        error = refusals[-1] if refusals and refusal_first else _last_error(text)
        raise RehearsalFailure(phase, f"{error} (exit {proc.returncode}; log: {log})")
    return text


def _last_error(text: str) -> str:
    """The last exception line of a log (Ray prefixes actor lines with (Actor pid=...))."""
    lines = [re.sub(r"^\(.*?\)\s*", "", line).strip() for line in text.splitlines()]
    errors = [
        line
        for line in lines
        if re.match(r"^[\w.]*(Error|Exception|Failure)\b:?", line)
        or line.startswith("invalid config")
    ]
    return errors[-1] if errors else (lines[-1] if lines else "no output")


def start_judge_server(r: Rehearsal, stack: ExitStack, port: int, dies_after: int | None) -> None:
    """The tiny classifier behind vLLM's /classify protocol on 127.0.0.1 (darling_nemo's
    classify_server), until the rehearsal ends."""
    drill = ["--die-at-classify", str(dies_after)] if dies_after else []
    server = stack.enter_context(
        _process_group(
            [
                sys.executable,
                "-m",
                "darling_nemo.classify_server",
                "serve",
                str(r.workdir / "classifier"),
                "--task",
                "classify",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # as darling-serve-classifiers serves it: LAST pooling turns the prefix
                # cache on for a causal classifier (the math configs' Qwen3 stand-in); the
                # shrunk judge reads ~8 tokens of a response, so blocks of 4, not vLLM's 16
                *caching_args(str(r.workdir / "classifier"), []),
                "--block-size",
                "4",
                "--middleware",
                auth.MIDDLEWARE,
                *drill,
            ],
            r.env,
            r.workdir / "classifier_server.log",
        )
    )
    health = f"http://127.0.0.1:{port}/health"
    wait_until(lambda: _http_ok(health), 120, "classifier server", server)


def judge_cache_line(log_root: Path) -> str:
    """'; judge prefix cache: N tokens reused' from the run's judge counters (the classify
    server's usage replies), or '' when the judge keeps none (it is not served)."""
    scalars = newest_run_scalars(log_root, "judge cache")
    if "darling/judge_cached_tokens" not in scalars:
        return ""
    reused = scalars["darling/judge_cached_tokens"]
    total = sum(reused.values())  # per-step counters (usage_since)
    return f"; judge prefix cache: {total:.0f} prompt tokens reused"


RAY_PORT_OPTIONS = (
    "ray-client-server-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
    "node-manager-port",
    "object-manager-port",
)


def start_ray(r: Rehearsal, stack: ExitStack, gpus: int) -> None:
    """A private Ray head with `gpus` fake GPUs (its own port and temp dir), which NeMo-RL's
    init_ray() attaches to through RAY_ADDRESS; stopped with its own process group. Each
    placement-group bundle asks for CPUs, so Ray is told of more than the machine has."""
    port = free_port()
    ray_proc = stack.enter_context(
        _process_group(
            [
                sys.executable,  # Ray's CLI of this environment, found without PATH
                "-m",
                "ray.scripts.scripts",
                "start",
                "--head",
                "--block",
                f"--port={port}",
                # Ray's fixed default ports (client server 10001, dashboard agent 52365, ...)
                # would clash with another rehearsal's head on this machine: all free ones.
                *(f"--{name}={free_port()}" for name in RAY_PORT_OPTIONS),
                f"--num-gpus={gpus}",
                f"--num-cpus={16 + 4 * gpus}",
                f"--temp-dir={r.workdir / 'ray'}",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            # the allow-list NeMo-RL's workers get (ray_env.py): its workers inherit it
            ray_env_vars(r.env),
            r.workdir / "ray.log",
        )
    )
    wait_until(lambda: port_open(port), 120, "ray", ray_proc)
    r.ray_address = f"127.0.0.1:{port}"


def run_expect(steps: int, resumed: bool) -> Expect:
    """What a rehearsal's run to step `steps` must show."""
    return Expect(
        trained=(steps,),
        validated=(steps,),
        resumed=resumed,
        resume_marker="weights read back",
        prob_error_tolerance=REHEARSAL_PROB_ERROR_TOLERANCE,
        stand_in_checks=True,
    )


def secrets_phase(r: Rehearsal) -> None:
    """No secret of the rehearsal's environment, planted ones included, in Ray's tables
    (while its Ray still runs) or in any file the rehearsal wrote (secrets_check.py)."""
    found = check_no_secrets(r.env, r.ray_address, r.workdir, r.planted)
    check(not found.startswith("FOUND"), "secrets", found)
    print(f"phase secrets ({found}): PASS", flush=True)


RUNS = (  # (phase, grpo.max_num_steps, resumed)
    ("run 1 (setup, step 1, validation, checkpoint, stop)", 1, False),
    ("run 2 (resume from step 1, step 2, checkpoint)", 2, True),
)


def rehearse(
    recipe: Path,
    config_path: str,
    overrides: list[str],
    task: str,
    judge_dies_after: int | None = None,
    runs: int = len(RUNS),
) -> int:
    """The whole rehearsal; returns the exit status (0 only on PASS).

    judge_dies_after: failure drill; the classifier server dies when its N-th /classify
    request arrives, before answering it (the start-up probe of each run is one request:
    N=2 kills it in the middle of step 1's first judge call).
    runs: 1 stops after run 1 (CI rehearses the GRPO baselines so: their resume is their
    DARLING twins' code path); 0 stops after prepare, before Ray (CI checks every config so
    up to its tiny models and shrunk config, and trains one config per code path)."""
    workdir = Path(tempfile.mkdtemp(prefix="darling-rehearsal-", dir="/tmp"))
    r = Rehearsal(recipe, config_path, list(overrides), task, workdir)
    print(f"rehearsal of {config_path} {' '.join(overrides)} in {workdir}", flush=True)
    started = time.monotonic()
    # A killed rehearsal (Ctrl-C, SIGTERM) still stops its Ray and server on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        phase = "contract"
        contract_phase(config_path, overrides)  # before anything starts (docs/contracts.md)
        phase = "prepare"
        with ExitStack() as stack:
            judge_port = free_port()
            config, given, shrunk = prepare(r, f"http://127.0.0.1:{judge_port}")
            plan = judging_plan(shrunk, validate_darling(shrunk["darling"]))
            print("phase prepare (tiny models, prompts, shrunk config): PASS", flush=True)
            if runs == 0:
                print(
                    f"rehearsal: PASS up to prepare ({time.monotonic() - started:.0f} s; "
                    f"no run asked; logs in {workdir})",
                    flush=True,
                )
                return 0
            launched = shrunk["darling"]["judge"].get("launch")
            if launched:  # the recipe starts and stops the stand-in itself, in each run
                print(f"phase judge server (started by the recipe: {launched['executable']})")
            elif judge_kind(shrunk["darling"]["judge"]["kind"]).stand_in.serves:
                phase = "judge server"
                start_judge_server(r, stack, judge_port, judge_dies_after)
                print(f"phase judge server (classify_server on 127.0.0.1:{judge_port}): PASS")
            phase = "ray"
            cluster = shrunk_cluster(given)
            gpus = shrunk["cluster"]["gpus_per_node"] * shrunk["cluster"]["num_nodes"]
            start_ray(r, stack, gpus)
            rm = ", reward model 1" if cluster["rm_nodes"] else ""
            print(
                f"phase ray (private, {r.ray_address}, {gpus} fake GPUs: policy "
                f"{cluster['policy_world']} = {cluster['policy_nodes']} node(s) x "
                f"{cluster['gpus_per_node']}, DP {cluster['dp']}{rm}): PASS",
                flush=True,
            )
            for phase, steps, resumed in RUNS[:runs]:
                t0 = time.monotonic()
                log = workdir / f"run{steps}.log"
                text = run_phase(r, phase, config, steps, log)
                logs, ckpts = workdir / "logs", workdir / "checkpoints"
                verify_run(text, shrunk, phase, logs, ckpts, run_expect(steps, resumed), plan)
                cache = judge_cache_line(logs)
                print(f"phase {phase}: PASS ({time.monotonic() - t0:.0f} s{cache})", flush=True)
            phase = "secrets"
            secrets_phase(r)
    except RehearsalFailure as failure:
        print(f"rehearsal: FAIL at {failure.phase}: {failure.error}", flush=True)
        return 1
    except Exception as err:  # anything unforeseen is still one clear line
        print(f"rehearsal: FAIL at {phase}: {type(err).__name__}: {err}", flush=True)
        return 1
    print(f"rehearsal: PASS ({time.monotonic() - started:.0f} s; logs in {workdir})", flush=True)
    return 0
