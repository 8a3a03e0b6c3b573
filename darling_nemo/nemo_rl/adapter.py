"""DARLING inside NeMo-RL v0.4.0's synchronous GRPO, without forking NeMo-RL.

With overlap.py, the only module of darling-nemo that imports `nemo_rl` (always lazily,
inside functions, so the rest of this module, the transform included, runs and is tested
without it).

Where DARLING goes in. `grpo_train` (nemo_rl/algorithms/grpo.py, v0.4.0) does, every step:

    rollout (run_multi_turn_rollout, or run_async_multi_turn_rollout with vLLM async_engine)
    repeated_batch = scale_rewards(repeated_batch, grpo.reward_scaling)   <- hooked here
    [apply_reward_shaping]   baseline, std = calculate_baseline_and_std_per_prompt(...)
    advantages = total_reward - baseline   [/ std when grpo.normalize_rewards]

`darling_rewards()` replaces the module attribute `nemo_rl.algorithms.grpo.scale_rewards`,
which grpo_train looks up at call time, by a function that runs the original and then
rewrites `total_reward` with the DARLING reward (quality x diversity). It is called once per
generation batch in both rollout modes and never during validation, so validation accuracy
stays the plain environment reward. NeMo-RL then subtracts its own group-mean baseline:
with grpo.normalize_rewards=false and use_leave_one_out_baseline=false (checked by
`checks.validate_nemo_rl_config`) the trained advantage is DARLING's.
`async_grpo_train` never calls scale_rewards, so async GRPO is refused at validation.
With darling.overlap=true the hook only starts the judge and `policy.train` finishes the
step's DARLING work (overlap.py), with the same result. With
darling.judge_during_generation=true and the async engine, pairs are judged while the
rollout still runs (`overlap.judge_during_generation`), and the hook judges only the rest.

Groups. Rows are grouped by identical prompt token ids (the messages before the first
assistant message), exactly as NeMo-RL's baseline (`calculate_baseline_and_std_per_prompt`,
torch.unique over the prompts) groups them: identical prompts in one batch form one group,
so DARLING partitions the same responses whose rewards NeMo-RL compares. `idx` is not
used: it is not what the baseline groups by, and with the async engine it does not name
the prompt (v0.4.0's `run_sample_multi_turn_rollout` stores `"idx": sample_idx`, the
row's position in the batch, in each sample's final state, which
`run_async_multi_turn_rollout` then reads back).

Metrics reach NeMo-RL's logger (wandb / tensorboard / mlflow) through `DarlingLogger`, which
wraps the Logger that `setup()` returns and writes the pending `darling/*` scalars at the
step grpo_train logs its `train/*` metrics.
"""

from __future__ import annotations

import gc
import importlib
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from darling_nemo import tasks
from darling_nemo.judges.figures import say_judge_figures
from darling_nemo.judges.registry import judge_kind
from darling_nemo.nemo_rl.checks import validate_nemo_rl_config
from darling_nemo.nemo_rl.judging_plan import (  # noqa: F401 (OVERLAP_ON: re-exported)
    OVERLAP_ON,
    JudgingPlan,
    judging_plan,
)
from darling_nemo.nemo_rl.memory_probe import MEMORY_REPORT_ENV, probed
from darling_nemo.nemo_rl.prefix_worker import NEMO_RL_WORKER, WORKER
from darling_nemo.nemo_rl.ray_env import hand_wandb_its_key, only_allowed_env, reward_env_vars
from darling_nemo.nemo_rl.touch_points import (
    NEMO_RL_VERSION,
    TouchPointError,
    check_touch_points,
    replaced,
)
from darling_nemo.nemo_rl.transform import (  # noqa: F401 (re-exported: the adapter's API)
    DIVERSITY_KEY,
    QUALITY_KEY,
    DarlingOutcome,
    DarlingRewardTransform,
    RolloutRows,
    prompt_and_response,
)
from darling_nemo.nemo_rl.user_env import (
    answers_of,
    metrics_of,
    rendered_and_cut,
    setup_user_data,
)
from darling_nemo.schema import ConfigError, DarlingConfig, config_problems
from darling_nemo.tasks.judge import run_judge

# The DARLING hook's line in NeMo-RL's per-step timing breakdown (timing/train/*).
JUDGE_TIMER = "darling_judge"
REPO_ROOT = Path(__file__).resolve().parents[2]


class DarlingLogger:
    """NeMo-RL's Logger, plus the DARLING scalars written at each `train` log call.

    grpo_train logs `metrics` with prefix "train" once per step; right before that, the
    transform's pending metrics go to the same backends under `darling/` at the same step.
    Everything else is delegated unchanged.
    """

    def __init__(
        self,
        logger: Any,
        transform: DarlingRewardTransform,
        more_metrics: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self._logger = logger
        self._transform = transform
        self._more_metrics = more_metrics  # e.g. the user reward environment's figures

    def log_metrics(
        self,
        metrics: dict[str, Any],
        step: int,
        prefix: str | None = "",
        step_metric: str | None = None,
    ) -> None:
        if prefix == "train":
            darling = self._transform.pop_metrics()
            if self._more_metrics is not None:
                darling.update(self._more_metrics())
            if darling:
                self._logger.log_metrics(darling, step, prefix="darling")
                print(
                    "  • DARLING: "
                    + ", ".join(
                        f"{k}={darling[k]:.4g}"
                        for k in ("quality_mean", "diversity_mean", "classes_per_group")
                        if k in darling
                    ),
                    flush=True,
                )
        self._logger.log_metrics(metrics, step, prefix, step_metric)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


# ---------------------------------------------------------------------------------------------
# The hook
# ---------------------------------------------------------------------------------------------


def require_nemo_rl(command: str = "python recipes/darling_math.py --config conf/...") -> None:
    """Fail early (a ConfigError: the config asks for what this machine lacks), saying how to
    run `command`, when NeMo-RL is not importable, or when it is not the version whose
    functions the adapter replaces."""
    try:
        import nemo_rl
    except ImportError as err:
        local = sorted(str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.glob("conf/local/*.yaml"))
        raise ConfigError(
            f"engine: nemo_rl needs NeMo-RL v{NEMO_RL_VERSION}, which is not importable here "
            f"({err}).\nRun it in the darling-nemo container (containers/build.sh, on "
            f"nvcr.io/nvidia/nemo-rl:v{NEMO_RL_VERSION}), from the repository root:\n"
            "  docker run --gpus all --ipc=host -v $PWD:/opt/darling-nemo darling-nemo:<tag> "
            f"{command}\n"
            "  srun --container-image=<darling-nemo.sqsh> --container-mounts=$PWD:/opt/darling-nemo "
            f"--container-workdir=/opt/darling-nemo {command}\n"
            "  (multi-node: sbatch slurm/*.sub; docs/nemo-rl-recipes.md),\n"
            "or, on a machine without NeMo-RL, a single-machine config (engine: trl): "
            + (", ".join(local) if local else "conf/local/*.yaml")
        ) from None
    try:  # before Ray starts: a changed function fails now, naming it
        check_touch_points(nemo_rl.__version__)
    except TouchPointError as err:
        raise ConfigError(f"engine: nemo_rl: {err}") from None


def _off_the_critical_path(
    master_config: dict[str, Any],
    transform: DarlingRewardTransform,
    policy: Any,
    timer: Any,
    plan: JudgingPlan,
) -> Any:
    """The overlapped judge where the plan says so, else None (the plan's fallback: the
    reward hook judges; also without a Policy, whatever a plan made for one says)."""
    from darling_nemo.nemo_rl.overlap import OverlappedDarling

    if plan.fallback.on or policy is None:
        return None
    return OverlappedDarling(
        transform,
        leave_one_out=bool(master_config["grpo"]["use_leave_one_out_baseline"]),
        normalize=bool(master_config["grpo"]["normalize_rewards"]),
        timer=timer,
    )


def reward_judge(darling: DarlingConfig, task: str) -> Any:
    """The judge the reward transform asks, as `tasks.judge.run_judge` decides it for the
    run's task: the task's judge of final answers for a method that needs answer classes
    (darling.method=outcome: math-verify on the math task; checks.py refuses it with a
    reward model), darling.judge where the section calls it, else None (lexical rules)."""
    return run_judge(tasks.task(task), darling).make()


@contextmanager
def prefix_reporting_workers() -> Iterator[None]:
    """NeMo-RL's async vLLM workers built in this block are darling_nemo's subclass that
    reports settled words (prefix_worker.py): VllmGeneration names its worker class by path
    to RayWorkerBuilder, which this maps; the subclass runs in the same Python environment."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.models.generation.vllm import vllm_generation

    builder = vllm_generation.RayWorkerBuilder

    class PrefixReportingBuilder(builder):  # type: ignore[misc, valid-type]
        def __init__(self, ray_actor_class_fqn: str, *args: Any, **kwargs: Any) -> None:
            if ray_actor_class_fqn == NEMO_RL_WORKER:
                ray_actor_class_fqn = WORKER
            super().__init__(ray_actor_class_fqn, *args, **kwargs)

    ACTOR_ENVIRONMENT_REGISTRY.setdefault(WORKER, ACTOR_ENVIRONMENT_REGISTRY[NEMO_RL_WORKER])
    with replaced(vllm_generation, RayWorkerBuilder=PrefixReportingBuilder):
        yield


@contextmanager
def darling_rewards(
    master_config: dict[str, Any],
    policy: Any = None,
    darling: DarlingConfig | None = None,
    plan: JudgingPlan | None = None,
    *,
    task: str,
) -> Iterator[DarlingRewardTransform]:
    """Install the DARLING reward into NeMo-RL's grpo_train for the duration of the block.

    `darling`: the section as the recipe validated it (`recipe.check_config`). Without it
    the darling: section and its consistency with grpo:/loss_fn: are validated here first
    (raises ConfigError listing every problem). Yields the transform (for `DarlingLogger`).
    With darling.overlap=true and `policy` (the Policy that setup() returns and grpo_train
    trains) the judge runs while NeMo-RL computes log-probabilities and `policy.train`
    waits for it (overlap.py); without a policy, with darling.overlap=false, or where
    `checks.overlap_fallbacks` names a reason (printed), the judge runs inside the hook,
    before the baseline. `plan`: the run's judging plan (`judging_plan.judging_plan`),
    decided once by the caller; None: decided here. It is printed here, once. `task`: the
    run's task (the registry's name), whose judge of final answers a method may need.
    """
    from nemo_rl.algorithms import grpo

    from darling_nemo.nemo_rl.overlap import judge_during_generation, overlapped_train

    if darling is None:
        darling = validate_nemo_rl_config(master_config)
    original = grpo.scale_rewards
    if getattr(original, "_darling_wrapped", False):
        raise RuntimeError("the DARLING reward hook is already installed")
    transform = DarlingRewardTransform(darling, reward_judge(darling, task))
    original_timer = grpo.Timer
    step_timers: list[Any] = []

    class StepTimer(original_timer):  # type: ignore[misc, valid-type]
        """NeMo-RL's Timer; the first one made while the hook is in place is grpo_train's
        per-step timer (validation makes its own later), where the DARLING time is put."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            step_timers.append(self)

    def judge_timer() -> Any:
        # grpo_train times generation before scale_rewards and reward_calculation after it:
        # without a label of its own the judge's wall time would show only in the total.
        return step_timers[0].time(JUDGE_TIMER) if step_timers else nullcontext()

    if plan is None:
        plan = judging_plan(master_config, darling, policy=policy is not None)
    for line in plan.lines():  # once, as the run starts
        print(line, flush=True)
    overlapped = _off_the_critical_path(master_config, transform, policy, judge_timer, plan)

    def scale_rewards_then_darling(repeated_batch: Any, reward_scaling_cfg: Any) -> Any:
        repeated_batch = original(repeated_batch, reward_scaling_cfg)
        if overlapped is not None:
            overlapped.start(repeated_batch)
        else:
            with judge_timer():
                transform.apply(repeated_batch)
        return repeated_batch

    scale_rewards_then_darling._darling_wrapped = True  # type: ignore[attr-defined]
    try:
        with (
            replaced(grpo, scale_rewards=scale_rewards_then_darling, Timer=StepTimer),
            overlapped_train(policy, overlapped) if overlapped else nullcontext(),
            judge_during_generation(transform, plan) if plan.generation.on else nullcontext(),
        ):
            yield transform
    finally:
        close = getattr(transform.judge.judge if transform.judge else None, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------------------------
# Data: prompts + quality environments, as NeMo-RL v0.4.0's examples build them
# ---------------------------------------------------------------------------------------------


def chat_prompt_processor(
    datum_dict: dict[str, Any],
    task_data_spec: Any,
    tokenizer: Any,
    max_seq_length: int | None,
    idx: int,
) -> dict[str, Any]:
    """A NeMo-RL task data processor for chat prompts scored by a reward model.

    Like NeMo-RL's math_hf_data_processor (the user turn rendered with the policy's chat
    template and a generation prompt), except that the message `content` keeps the raw
    prompt: the reward-model environment applies its own chat template to `content`, and
    would otherwise score a doubly templated conversation. Too-long prompts are cut to a few
    tokens with loss_multiplier 0, as NeMo-RL does.
    """
    prompt = datum_dict["messages"][0]["content"]
    if task_data_spec.prompt:
        prompt = task_data_spec.prompt.format(prompt)
    messages = []
    if task_data_spec.system_prompt:
        messages.append({"role": "system", "content": task_data_spec.system_prompt})
    messages.append({"role": "user", "content": prompt})
    _, token_ids, length, loss_multiplier = rendered_and_cut(tokenizer, messages, max_seq_length)
    # One message carries the whole rendered prompt (system turn included), so the token ids
    # match what generation sees; the reward model gets the raw user prompt.
    user = {"role": "user", "content": prompt, "token_ids": token_ids}
    return {
        "message_log": [user],
        "length": length,
        "extra_env_info": {},
        "loss_multiplier": loss_multiplier,
        "idx": idx,
        "task_name": datum_dict["task_name"],
    }


def check_data_paths(cfg: dict[str, Any]) -> None:
    """The data files a NeMo-RL config names exist (relative to the cwd, as NeMo-RL reads
    them); a ConfigError naming each missing one's key otherwise. Needs no NeMo-RL. A run
    trained from its task: section reads its prompts through the task, not these paths."""
    data = cfg["data"]
    problems = []
    keys = ["prompt_file", "system_prompt_file"]
    if cfg.get("task") is None:
        keys += ["train_data_path", "val_data_path"]
    for key in keys:
        value = data.get(key)
        is_file = isinstance(value, str) and Path(value).suffix in {".txt", ".json", ".jsonl"}
        if is_file and not Path(value).exists():
            problems.append(f"data.{key}: file not found: {value} (cwd {os.getcwd()})")
    if problems:
        entries = [tasks.task(name).nemo_rl for name in tasks.task_names()]
        hint = "prepare data with " + " / ".join(e.prep_command for e in entries if e)
        message = config_problems(problems)
        raise ConfigError(f"{message}: {hint}" if len(problems) == 1 else f"{message}\n  ({hint})")


def setup_data(
    tokenizer: Any, cfg: dict[str, Any], task: str
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """(train dataset, val dataset or None, task_to_env, val_task_to_env) for a task of the
    registry (`tasks.task`: its name or an older one, as its data rows carry it), mirroring
    NeMo-RL's examples/run_grpo_math.py and run_grpo_rm.py: the task's `NemoRlTask` names
    its environment (built with `env.<env_key>`) and its data processor.

    math: NeMo-RL's MathEnvironment (math-verify, reward 1/0) as quality.
    chat (wildchat): NeMo-RL's RewardModelEnvironment (Bradley-Terry reward model on its
    own GPUs, env.reward_model) as quality. The data paths were checked by `start`.
    A task trained from the config's own task: section (`tasks.trains_from_section`: a
    user's reward functions or a plugin's task, its TRL prompts and quality in one generic
    environment, user_env.py) builds its data itself; `task` is then the section's kind.
    """
    entry = tasks.task(task)
    if tasks.trains_from_section(entry):
        return setup_user_data(tokenizer, cfg, reward_env_vars())
    from nemo_rl.data.datasets import AllTaskProcessedDataset, load_response_dataset
    from nemo_rl.data.interfaces import TaskDataSpec
    from nemo_rl.data.processors import math_hf_data_processor
    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env

    if entry.nemo_rl is None:
        raise ValueError(f"the {entry.name} task does not run on NeMo-RL")
    env_name = entry.nemo_rl.environment
    module_name, _, class_name = env_name.rpartition(".")
    env_class = getattr(importlib.import_module(module_name), class_name)
    env_cfg = cfg["env"][entry.nemo_rl.env_key]
    processor = {"math_hf": math_hf_data_processor, "chat_prompt": chat_prompt_processor}[
        entry.nemo_rl.processor
    ]
    data_cfg = cfg["data"]
    spec = TaskDataSpec(
        task_name=task,
        prompt_file=data_cfg["prompt_file"],
        system_prompt_file=data_cfg["system_prompt_file"],
    )
    data = load_response_dataset(data_cfg, cfg["grpo"]["seed"])
    processors = {task: (spec, processor)}
    env = env_class.options(
        runtime_env={"py_executable": get_actor_python_env(env_name), "env_vars": reward_env_vars()}
    ).remote(env_cfg)
    max_len = data_cfg["max_input_seq_length"]
    dataset = AllTaskProcessedDataset(
        data.formatted_ds["train"], tokenizer, spec, processors, max_seq_length=max_len
    )
    val_dataset = None
    if data.formatted_ds["validation"]:
        val_dataset = AllTaskProcessedDataset(
            data.formatted_ds["validation"], tokenizer, spec, processors, max_seq_length=max_len
        )
    task_to_env = {task: env}
    return dataset, val_dataset, task_to_env, task_to_env


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


def start(cfg: dict[str, Any], darling: DarlingConfig | None = None) -> tuple[dict[str, Any], Any]:
    """Check the data files (and probe a served judge), number the log dir, attach to /
    start Ray, load the tokenizer.

    `darling`: the section as the recipe validated it; None: validated here.
    Returns (cfg with NeMo-RL's generation config filled in, tokenizer).
    """
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.distributed.virtual_cluster import init_ray
    from nemo_rl.models.generation import configure_generation_config
    from nemo_rl.utils.logger import get_next_experiment_dir

    if darling is None:
        darling = validate_nemo_rl_config(cfg)
    check_data_paths(cfg)
    say_judge_figures(darling)
    probe = judge_kind(darling.judge).probe
    if darling.calls_judge and probe is not None:  # a wrong URL fails now
        print(f"darling.judge: {probe(darling.judge)}", flush=True)
    cfg["logger"]["log_dir"] = get_next_experiment_dir(cfg["logger"]["log_dir"])
    print(f"Logging to {cfg['logger']['log_dir']}", flush=True)
    with only_allowed_env():  # init_ray hands Ray os.environ as the job's runtime_env
        init_ray()
    tokenizer = get_tokenizer(cfg["policy"]["tokenizer"])
    cfg["policy"]["generation"] = configure_generation_config(
        cfg["policy"]["generation"], tokenizer
    )
    return cfg, tokenizer


def save_by_epoch(job_end_epoch: str | None, save_margin_s: str | None) -> float | None:
    """When a SLURM run must have saved (epoch seconds): the job's end minus the margin, as
    slurm/common.sh passes them in DARLING_JOB_END_EPOCH and DARLING_SAVE_MARGIN_S.
    None when the job has no end (not under the launcher, or no time limit)."""
    if not job_end_epoch:
        return None
    values = []
    for name, text in (
        ("DARLING_JOB_END_EPOCH", job_end_epoch),
        ("DARLING_SAVE_MARGIN_S", save_margin_s),
    ):
        try:
            values.append(float(text or ""))
        except ValueError:
            raise ValueError(
                f"{name}={text!r}: expected seconds (slurm/common.sh sets it with the other)"
            ) from None
    return values[0] - values[1]


def checkpoint_must_save_by(save_by: float, now: float, configured: str | None = None) -> str:
    """NeMo-RL's checkpointing.checkpoint_must_save_by ("DD:HH:MM:SS") to save by `save_by`.

    NeMo-RL's TimeoutChecker counts it from its creation at the start of grpo_train, not
    from the start of the job, so `now` must be that moment. The earlier of this and a value
    the config sets itself; "00:00:00:00" (save after the next step and stop) if past.
    """
    left = max(0, int(save_by - now))
    if configured is not None:
        days, hours, minutes, seconds = (int(x) for x in configured.split(":"))
        left = min(left, ((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    days, rest = divmod(left, 86400)
    return f"{days:02d}:{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def train(
    cfg: dict[str, Any],
    tokenizer: Any,
    data: tuple[Any, Any, dict[str, Any], dict[str, Any]],
    darling: DarlingConfig | None = None,
    *,
    task: str,
) -> None:
    """NeMo-RL's own setup() and grpo_train(), with the DARLING reward and metrics hooked in.

    Under slurm/common.sh (DARLING_JOB_END_EPOCH set) checkpointing.checkpoint_must_save_by
    is set right before grpo_train, to save and stop DARLING_SAVE_MARGIN_S before the job's
    end whatever the setup took; the launcher then requeues the job. `darling`: the section
    as the recipe validated it (None: validated when the reward hook is installed). `task`:
    the run's task (the registry's name; its judge of final answers, `reward_judge`).
    """
    save_by = save_by_epoch(  # read (and checked) before the long setup
        os.environ.get("DARLING_JOB_END_EPOCH"), os.environ.get("DARLING_SAVE_MARGIN_S")
    )
    failure = None
    try:
        _setup_and_train(cfg, tokenizer, data, save_by, darling, task)
    except Exception:
        failure = traceback.format_exc()
    if failure is not None:
        # NeMo-RL v0.4.0's RayVirtualCluster shuts itself down in __del__, which re-initialises
        # Ray when it runs at interpreter exit: a failed driver then hangs instead of exiting.
        # Collect the failed run's objects now, while Ray is still connected.
        gc.collect()
        raise DriverFailed(failure)


class DriverFailed(RuntimeError):
    """NeMo-RL's setup() or grpo_train() raised; the message is the traceback."""


def _setup_and_train(
    cfg: dict[str, Any],
    tokenizer: Any,
    data: tuple[Any, Any, dict[str, Any], dict[str, Any]],
    save_by: float | None,
    darling: DarlingConfig | None,
    task: str,
) -> None:
    from nemo_rl.algorithms.grpo import grpo_train, setup

    dataset, val_dataset, task_to_env, val_task_to_env = data
    darling = darling or validate_nemo_rl_config(cfg)
    plan = judging_plan(cfg, darling)
    # darling.prefix_judging: NeMo-RL builds its async vLLM workers in setup(); they must be
    # the ones that report settled words (prefix_worker.py). setup() copies os.environ into
    # every worker's runtime_env, which Ray's state lists: only the allow-listed variables
    # are set meanwhile (ray_env.py); wandb, started there too, has its key in its settings.
    if cfg["logger"].get("wandb_enabled"):
        hand_wandb_its_key()
    with only_allowed_env(), prefix_reporting_workers() if plan.prefix.on else nullcontext():
        (
            policy,
            policy_generation,
            _clusters,
            dataloader,
            val_dataloader,
            loss_fn,
            logger,
            checkpointer,
            grpo_state,
            master_config,
        ) = setup(cfg, tokenizer, dataset, val_dataset)
    # --smoke: each phase's GPU memory peak on the policy workers (memory_probe.py).
    memory_report = os.environ.get(MEMORY_REPORT_ENV)
    with (
        probed(policy, Path(memory_report)) if memory_report else nullcontext(),
        darling_rewards(master_config, policy, darling, plan, task=task) as transform,
    ):
        transform.answers = answers_of(task_to_env, darling.method, task)  # answer_func's
        if save_by is not None:
            ckpt = master_config["checkpointing"]
            ckpt["checkpoint_must_save_by"] = checkpoint_must_save_by(
                save_by, time.time(), ckpt["checkpoint_must_save_by"]
            )
            deadline = ckpt["checkpoint_must_save_by"]
            print(f"checkpointing.checkpoint_must_save_by={deadline} (from now)", flush=True)
        grpo_train(
            policy,
            policy_generation,
            dataloader,
            val_dataloader,
            tokenizer,
            loss_fn,
            task_to_env,
            val_task_to_env,
            DarlingLogger(logger, transform, metrics_of(task_to_env, task)),
            checkpointer,
            grpo_state,
            master_config,
        )
    for env in task_to_env.values():
        env.shutdown.remote()
