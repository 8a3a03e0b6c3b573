"""The TRL run: GRPO arguments, prompt order, callbacks, checkpoints and resuming.

One config takes this path: `validate_trl_config` (schema) -> `run` takes the folder's
lock, refuses a changed run directory (`check_resume_config`), chooses the newest intact
checkpoint (`announce_resume`: damaged ones moved aside) and saves config.yaml -> `train`
builds the policy (policy.py) and the DARLING reward (reward.py) for the task (tasks.py),
hands them to TRL's GRPOTrainer with `grpo_args` and `prompt_stream`, evaluates held-out
prompts through a callback (evaluate.py) and writes final_metrics.json.

    from darling_nemo.trl import run
    metrics = run(load_config("conf/local/math_trl.yaml"))
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from darling_nemo import tasks
from darling_nemo.config import (
    check_model_path,
    check_output_dir,
    save_config,
)
from darling_nemo.interrupt import interrupt_reported, stop_if_interrupted
from darling_nemo.judges import JudgeError
from darling_nemo.judges.figures import say_judge_figures
from darling_nemo.judges.registry import check_judge_models, judge_kind
from darling_nemo.manifest import check, write_manifest
from darling_nemo.resume import changed_settings, write_json
from darling_nemo.run_folder import (
    DiskFull,
    disk_full,
    disk_full_message,
    last_complete,
    run_lock,
)
from darling_nemo.schema import (
    ConfigError,
    PretrainedPolicyConfig,
    TrlRunConfig,
    validate_section,
)
from darling_nemo.trl.checkpoints import (
    all_or_nothing,
    announce_resume,
    checkpoint_step,
    last_checkpoint,
)
from darling_nemo.trl.logprobs import trainer_class_for
from darling_nemo.trl.reward import DarlingReward, conversational
from darling_nemo.trl.tasks import TrainingTask, build_task, judge_for_method
from darling_nemo.user_rewards import RewardFunctionError


def validate_trl_config(cfg: Mapping[str, Any]) -> TrlRunConfig:
    """The whole `engine: trl` config, strictly: raises ConfigError naming every bad key
    path. Imports no torch, so a recipe's --dry-run can call it anywhere."""
    return validate_section(TrlRunConfig, dict(cfg))


def zero_reward_note(cfg: TrlRunConfig) -> str | None:
    """Why a run will log reward and loss 0 at every step, when the config says so."""
    if cfg.policy.kind != "tiny" or not tasks.task_of(cfg.task).untrained_scores_zero:
        return None
    return (
        f"note: policy.kind=tiny is a small randomly initialised model: on task.kind="
        f"{cfg.task.kind} it practically never writes the correct answer, so quality is 0, "
        "DARLING's reward "
        "(quality x diversity) and every advantage are 0, and the loss is 0 at every step. "
        "This run checks the plumbing (generation, judge, logging, checkpoints); to learn, "
        "use policy={kind: pretrained, name_or_path: ...}."
    )


@contextmanager
def upstream_deprecations_silenced() -> Iterator[None]:
    """Hide the FutureWarnings TRL's own code causes and this package cannot fix.

    transformers 5 renamed PreTrainedModel's `is_gradient_checkpointing` and
    `gradient_checkpointing_enable/disable` to `*activation_checkpointing*` (the old names
    warn, "will be removed in v6"); TRL 1.16 still calls the old names
    (trl.models.utils.disable_gradient_checkpointing, around every generation). Only those
    three messages, raised in transformers.modeling_utils, are silenced, only inside this
    block; every other warning shows.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`(is_gradient_checkpointing|gradient_checkpointing_(enable|disable))` "
            r"is deprecated",
            category=FutureWarning,
            module=r"transformers\.modeling_utils",
        )
        yield


# trainer: keys TRL's GRPOConfig takes under the same name, and those it names otherwise.
TRAINER_KEYS_AS_IS = (
    "max_steps",
    "learning_rate",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "temperature",
    "top_p",
    "max_completion_length",
    "loss_type",
    "save_steps",
    "save_total_limit",
    "logging_steps",
)
TRAINER_KEYS_RENAMED = {  # GRPOConfig's name: ours
    "num_generations": "group_size",
    "steps_per_generation": "updates_per_rollout",
    "lr_scheduler_type": "lr_scheduler",
    "epsilon": "clip_low",
    "epsilon_high": "clip_high",
    "beta": "kl_coef",
}


def grpo_args(cfg: TrlRunConfig, output_dir: Path) -> Any:
    """TRL's GRPOConfig for a validated run config (scale_rewards='none': see module doc)."""
    import torch
    from trl import GRPOConfig

    t = cfg.trainer
    use_bf16 = t.precision == "bfloat16" or (t.precision == "auto" and torch.cuda.is_available())
    rollout = t.prompts_per_step * t.group_size  # divisible by updates_per_rollout (schema)
    # TRL turns checkpointing on by default under the name transformers 5 deprecated
    # (`gradient_checkpointing`, a FutureWarning per run); the same setting under the new
    # name where this transformers has it.
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    checkpointing = (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )
    return GRPOConfig(
        **{checkpointing: True},
        **{name: getattr(t, name) for name in TRAINER_KEYS_AS_IS},
        **{theirs: getattr(t, ours) for theirs, ours in TRAINER_KEYS_RENAMED.items()},
        output_dir=str(output_dir),
        seed=cfg.seed,
        data_seed=cfg.seed,
        per_device_train_batch_size=rollout // t.updates_per_rollout,
        gradient_accumulation_steps=1,
        scale_rewards="none",
        bf16=use_bf16,
        use_cpu=not torch.cuda.is_available(),
        save_strategy="steps",
        report_to=list(cfg.logging.report_to),
        run_name=output_dir.name,
        disable_tqdm=not cfg.logging.progress_bar,
        optim="adamw_torch",
        dataloader_num_workers=0,
        shuffle_dataset=False,  # the rows come pre-shuffled: see `prompt_stream`
    )


def prompt_stream(rows: Sequence[dict[str, Any]], cfg: TrlRunConfig) -> list[dict[str, Any]]:
    """The training prompts for the whole run, one seeded permutation of `rows` per pass.

    TRL's own shuffling draws each epoch's order from a generator that is not checkpointed,
    so a resumed run would see other prompts than an uninterrupted one. Handing TRL one long
    pre-shuffled "epoch" (and shuffle_dataset=False) makes the order a function of the seed
    alone: interrupted and resumed, a run trains on exactly the same batches.
    """
    t = cfg.trainer
    rollouts = -(-t.max_steps // t.updates_per_rollout)  # ceil
    needed = rollouts * t.prompts_per_step
    rng = np.random.default_rng(cfg.seed)
    stream: list[dict[str, Any]] = []
    while len(stream) < needed:
        stream.extend(rows[i] for i in rng.permutation(len(rows)))
    return stream


def make_eval_callback(
    run_cfg: TrlRunConfig, task: TrainingTask, tokenizer: Any, history_path: Path
) -> Any:
    """A TrainerCallback that evaluates held-out prompts every `evaluation.every_steps`."""
    from transformers import TrainerCallback

    from darling_nemo.trl.evaluate import append_history, history_steps, run_evaluation

    def evaluate_now(model: Any, step: int) -> None:
        append_history(history_path, step, run_evaluation(run_cfg, task, model, tokenizer, step))

    every = run_cfg.evaluation.every_steps

    class HeldOutEvaluation(TrainerCallback):
        def on_train_begin(
            self, args: Any, state: Any, control: Any, model: Any = None, **_: Any
        ) -> None:
            if state.global_step == 0 and not history_steps(history_path):
                evaluate_now(model, 0)

        def on_step_end(
            self, args: Any, state: Any, control: Any, model: Any = None, **_: Any
        ) -> None:
            if every and state.global_step % every == 0 and state.global_step != state.max_steps:
                evaluate_now(model, state.global_step)

    return HeldOutEvaluation()


def step_reached_callback(reached: list[int]) -> Any:
    """A TrainerCallback that keeps `reached[0]` at the last step trained."""
    from transformers import TrainerCallback

    class StepReached(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            reached[0] = state.global_step
            stop_if_interrupted()  # a Ctrl-C a library swallowed during the step

    return StepReached()


def silence_console_metrics(trainer: Any) -> None:
    """Keep the progress bar (if any) but stop printing every log dict to the console;
    the metrics still go to TensorBoard/wandb and to train_log.jsonl."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, *args: Any, **kwargs: Any) -> None:
            pass

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(BarOnly())


# Settings that may differ between an interrupted run and its continuation because they do
# not change what is trained or measured: where outputs go, what is printed or logged where,
# how many CPU threads compute the same numbers, how often (and how many) checkpoints are
# kept. trainer.max_steps may also change, see `check_resume_config`.
RESUME_MAY_CHANGE = (
    "resume",
    "output_dir",
    "torch_threads",
    "logging",
    "trainer.save_steps",
    "trainer.save_total_limit",
    "darling.plugins",  # where names come from, not what they compute
    "darling.plugin_path",
)


def with_keys_added_since(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config with the keys its task's section added since (`added_keys` of the
    registered task's section, whose `kind` is the task's name) filled in with their
    defaults, where the saved one lacks them."""
    task = saved.get("task")
    kind = task.get("kind") if isinstance(task, dict) else None
    config = tasks.task(kind).config if kind in tasks.task_names() else None
    if config is None:
        return saved
    added = {key: config.model_fields[key].default for key in config.added_keys}
    return {**saved, "task": {**added, **task}}


def check_resume_config(run_cfg: TrlRunConfig) -> None:
    """Refuse an output_dir that holds a run made with settings that change its results.

    The config saved there (config.yaml) is compared key by key with `run_cfg`, except the
    keys in RESUME_MAY_CHANGE. trainer.max_steps may grow or shrink under a constant
    learning rate (the prompt order of a longer run starts with the shorter run's, see
    `prompt_stream`), but never below the steps already trained; with a linear or cosine
    schedule the learning rate of every step depends on max_steps, so it may not change.
    """
    output_dir = Path(run_cfg.output_dir)
    final_path = output_dir / "final_metrics.json"
    checkpoint = last_checkpoint(output_dir)
    if not run_cfg.resume and (checkpoint or final_path.is_file()):
        raise ConfigError(
            f"output_dir {output_dir} already holds a run: set resume: true to continue it, "
            "or choose another output_dir (nothing is deleted for you)"
        )
    saved_path = output_dir / "config.yaml"
    if not saved_path.is_file():
        return
    saved = with_keys_added_since(yaml.safe_load(saved_path.read_text()) or {})
    new = run_cfg.model_dump(mode="json")
    may_change = list(RESUME_MAY_CHANGE)
    constant_lr = run_cfg.trainer.lr_scheduler == "constant"
    if constant_lr and saved.get("trainer", {}).get("lr_scheduler") == "constant":
        may_change.append("trainer.max_steps")
    changes = changed_settings(saved, new, may_change)
    if changes:
        hint = (
            "\n(trainer.max_steps may change only with trainer.lr_scheduler: constant)"
            if any(c.startswith("trainer.max_steps:") for c in changes)
            else ""
        )
        raise ConfigError(
            f"{output_dir} holds a run made with other settings (saved in {saved_path}):\n  "
            + "\n  ".join(changes)
            + f"{hint}\nUse another output_dir, or delete {output_dir} to start over."
        )
    trained = max(
        checkpoint_step(checkpoint) if checkpoint else 0,
        json.loads(final_path.read_text())["global_step"] if final_path.is_file() else 0,
    )
    if trained > run_cfg.trainer.max_steps:
        raise ConfigError(
            f"trainer.max_steps={run_cfg.trainer.max_steps}, but {output_dir} already holds "
            f"{trained} trained steps: use another output_dir for a shorter run"
        )


def check_wandb_installed(run_cfg: TrlRunConfig) -> None:
    """Refuse logging.report_to: [wandb] without wandb, before the run directory is written."""
    if "wandb" not in run_cfg.logging.report_to:
        return
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(
            "logging.report_to includes wandb, but wandb is not installed: "
            "uv sync --extra trl (or pip install 'wandb>=0.21'), or drop wandb from "
            "logging.report_to"
        ) from None


@contextmanager
def wandb_run_environment(run_cfg: TrlRunConfig, output_dir: Path) -> Iterator[None]:
    """With logging.report_to: [wandb], TRL's WandbCallback logs to a run made from
    WANDB_MODE / WANDB_PROJECT / WANDB_DIR: set from `logging` (and WANDB_DIR = output_dir)
    for this run unless already in the environment, and restored afterwards. The wandb run
    is finished at the end (flushing an offline run's file), so another run in the same
    process starts its own wandb run instead of logging into this one."""
    if "wandb" not in run_cfg.logging.report_to:
        yield
        return
    settings = {
        "WANDB_MODE": run_cfg.logging.wandb_mode,
        "WANDB_PROJECT": run_cfg.logging.wandb_project,
        "WANDB_DIR": str(output_dir),
    }
    added = [name for name in settings if name not in os.environ]
    os.environ.update({name: settings[name] for name in added})
    exit_code = 1  # a run that raised is marked failed in wandb
    try:
        yield
        exit_code = 0
    finally:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)
        for name in added:
            os.environ.pop(name, None)


def run(cfg: Mapping[str, Any] | TrlRunConfig) -> dict[str, float]:
    """Train with TRL's GRPOTrainer and DARLING rewards; return the final metrics.

    `cfg` is the loaded YAML (`engine: trl`), validated here in full, or a config already
    validated (`validate_trl_config`, `MiniConfig.arm_run`), used as it is. Output directory:
    checkpoints (`checkpoint-N`), `config.yaml`, TensorBoard logs, `eval_history.jsonl`
    (held-out evaluation at step 0, every `evaluation.every_steps`, and at the end) and
    `final_metrics.json`. With `resume: true` (default) a rerun continues from the newest
    checkpoint; a finished run returns its saved final metrics. A rerun whose settings
    would change the results is refused, naming the keys (`check_resume_config`).

    A policy whose tokenizer has a chat template (an instruct model) gets every prompt as
    one user message, so TRL renders it in that template (and the held-out evaluation
    too); a policy without one (the tiny policies, most base models) gets the plain text.
    """
    run_cfg = cfg if isinstance(cfg, TrlRunConfig) else validate_trl_config(cfg)
    check_wandb_installed(run_cfg)
    output_dir = Path(run_cfg.output_dir)
    check_output_dir(output_dir)
    # The lock first: a second run into this folder stops here (exit 2), before any judge
    # or model loads; a folder made only for the lock goes again if the run is refused.
    with run_lock(output_dir, tidy=True):
        check_resume_config(run_cfg)
        final, lead = finished_run(run_cfg)
        if final is not None:
            return final
        check_model_paths(run_cfg)
        probe_judge(run_cfg)
        task = build_task(run_cfg)  # the data is checked before anything is written
        resume_from = None
        if run_cfg.resume:  # chosen (damaged ones moved aside) before anything is rewritten
            final_weights = output_dir / "final"  # a finished run's: rewritten by the resume
            problem = check(final_weights).problem if lead and final_weights.exists() else None
            damaged = [(final_weights, problem)] if problem else []
            resume_from = announce_resume(output_dir, run_cfg.trainer.max_steps, damaged, lead)
        reached = [checkpoint_step(resume_from) if resume_from else 0]
        try:
            save_config(run_cfg.model_dump(mode="json"), output_dir / "config.yaml")
            note = zero_reward_note(run_cfg)
            if note:
                print(note, flush=True)
            with wandb_run_environment(run_cfg, output_dir), upstream_deprecations_silenced():
                return train(run_cfg, task, output_dir, resume_from, reached)
        except DiskFull:
            raise
        except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: what is kept, in words
            interrupt_reported()
            raise type(err)(stopped_words(output_dir, reached[0], run_cfg)) from None
        except RewardFunctionError as err:  # a user's function raised: it, the row, what is kept
            raise RewardFunctionError(
                f"{err}; {stopped_words(output_dir, reached[0], run_cfg)}"
            ) from None
        except Exception as err:  # a write past the checkpoints (logs, final model, metrics)
            if not disk_full(err):
                raise
            last = last_checkpoint(output_dir)
            what = "a write of the run" if last is None else "a write after " + last.name
            raise DiskFull(
                disk_full_message(
                    output_dir, what, None, last_complete(last.name if last else None)
                )
            ) from None


def stopped_words(output_dir: Path, reached: int, run_cfg: TrlRunConfig) -> str:
    """What an interrupted run keeps: the step it reached, its last complete checkpoint."""
    last = last_checkpoint(output_dir)
    kept = (
        f"the last complete checkpoint is {last.name} in {output_dir}; the same command "
        "resumes from it"
        if last
        else f"no checkpoint was saved yet in {output_dir}; the same command starts over"
    )
    return f"stopped after step {reached} of {run_cfg.trainer.max_steps}; {kept}"


def finished_run(run_cfg: TrlRunConfig) -> tuple[dict[str, Any] | None, str]:
    """A run already trained to max_steps whose final weights and newest checkpoint are
    intact: its saved final metrics, said in one line. Not finished: None, and (a finished
    run with either damaged) the words that open the resume's line; the resume moves the
    damaged one aside and trains from the newest intact checkpoint again."""
    output_dir = Path(run_cfg.output_dir)
    final_path = output_dir / "final_metrics.json"
    if not (run_cfg.resume and final_path.is_file()):
        return None, ""
    final = json.loads(final_path.read_text())
    if final.get("global_step") != run_cfg.trainer.max_steps:
        return None, ""
    for folder in (output_dir / "final", last_checkpoint(output_dir)):
        if folder is not None and check(folder).problem:
            return None, f"{output_dir}: finished ({final['global_step']} steps), but "
    print(
        f"{run_cfg.output_dir}: already complete ({final['global_step']} steps): nothing to do "
        "(delete the folder or choose another to rerun)",
        flush=True,
    )
    return final, ""


def probe_judge(run_cfg: TrlRunConfig) -> None:
    """A served judge answers before the run starts (as on the NeMo-RL path): an unreachable
    or wrong endpoint is a ConfigError naming darling.judge.endpoints[i] and its URL."""
    judge = run_cfg.darling.judge
    say_judge_figures(run_cfg.darling)
    probe = judge_kind(judge).probe
    if not (run_cfg.darling.calls_judge and probe is not None):
        return

    try:
        answered = probe(judge)
    except JudgeError as err:
        raise ConfigError(str(err)) from None
    print(f"darling.judge: {answered}", flush=True)


def check_model_paths(run_cfg: TrlRunConfig) -> None:
    """Every model the run loads, when named as a path, is a folder here (a ConfigError
    naming the key), before any model loads."""
    if isinstance(run_cfg.policy, PretrainedPolicyConfig):
        check_model_path(run_cfg.policy.name_or_path, "policy.name_or_path")

    model_paths = tasks.task_of(run_cfg.task).model_paths
    for key, model in model_paths(run_cfg.task) if model_paths else []:
        check_model_path(model, key)
    if run_cfg.darling.calls_judge:
        check_judge_models(run_cfg.darling.judge)


def train(
    run_cfg: TrlRunConfig,
    task: TrainingTask,
    output_dir: Path,
    resume_from: Path | None,
    reached: list[int],
) -> dict[str, Any]:
    """The body of `run`, once the run directory is checked and holds config.yaml; resumes
    from `resume_from` (None: from the start) and keeps `reached[0]` at the last step
    trained, for the line an interrupted run ends with."""
    import torch
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOTrainer

    from darling_nemo.mini.optim import use_optimizer
    from darling_nemo.trl.evaluate import append_history, run_evaluation, truncate_history
    from darling_nemo.trl.policy import build_policy

    final_path = output_dir / "final_metrics.json"
    history_path = output_dir / "eval_history.jsonl"
    if run_cfg.torch_threads is not None:
        torch.set_num_threads(run_cfg.torch_threads)
    set_seed(run_cfg.seed)
    model, tokenizer = build_policy(run_cfg, task, output_dir)
    if tokenizer.chat_template:  # a chat/instruct policy: TRL renders each prompt in it
        task.train_rows = conversational(task.train_rows)
        task.heldout_rows = conversational(task.heldout_rows)
    args = grpo_args(run_cfg, output_dir)
    judge = judge_for_method(run_cfg, task.judge)
    reward = DarlingReward(
        task.quality, run_cfg.darling, run_cfg.trainer.group_size, judge=judge, answers=task.answers
    )
    resume_step = checkpoint_step(resume_from) if resume_from else 0
    truncate_history(history_path, resume_step if resume_from else -1)
    trainer = all_or_nothing(trainer_class_for(run_cfg.darling, GRPOTrainer))(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(prompt_stream(task.train_rows, run_cfg)),
        processing_class=tokenizer,
        callbacks=[
            step_reached_callback(reached),
            *(
                [make_eval_callback(run_cfg, task, tokenizer, history_path)]
                if task.heldout_rows
                else []
            ),
        ],
    )
    reward.check_trainer_args(trainer.args, trainer.reward_funcs)
    use_optimizer(trainer, run_cfg.trainer.optimizer)
    if not run_cfg.logging.print_metrics:
        silence_console_metrics(trainer)
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    finally:  # a user's reward functions run in a worker pool (user_rewards.py)
        getattr(task.quality, "close", lambda: None)()
    train_seconds = time.perf_counter() - started
    trainer.save_model(str(output_dir / "final"))
    write_manifest(output_dir / "final")  # before final_metrics.json: a finished run has it

    final: dict[str, Any] = {
        "global_step": trainer.state.global_step,
        "resumed_from_step": resume_step,
    }
    logged = [entry for entry in trainer.state.log_history if "darling/quality_mean" in entry]
    (output_dir / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in logged))
    if logged:
        final.update({k: v for k, v in logged[-1].items() if k.startswith("darling/")})
    if task.heldout_rows:
        result = run_evaluation(run_cfg, task, trainer.model, tokenizer, trainer.state.global_step)
        append_history(history_path, trainer.state.global_step, result)
        final.update({f"eval/{k}": v for k, v in result.items()})
    final["train_seconds_this_session"] = train_seconds
    write_json(final_path, final)
    return final
