"""The steps behind `recipes/darling_math.py` and `recipes/darling_wildchat.py`.

Both recipes are this one function with their task: parse, choose the config (none given:
the one that fits the machine at hand), load and check it, then --rehearse / --dry-run /
the TRL engine / NeMo-RL's setup() + grpo_train() with the DARLING reward hooked in.
Config errors end with one message and exit status 2; nothing is written before the config
is accepted.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import yaml

from darling_nemo import tasks
from darling_nemo.config import (
    NOTHING_TO_RESUME,
    check_model_path,
    check_output_dir,
    load_config,
    report_error,
    report_interrupt,
    save_config,
)
from darling_nemo.console import close_bars
from darling_nemo.interrupt import started
from darling_nemo.judges import JudgeError
from darling_nemo.judges.node_server import NodeServerError, start_node_judge
from darling_nemo.judges.registry import check_judge_models
from darling_nemo.nemo_rl.checks import validate_nemo_rl_config
from darling_nemo.nemo_rl.ray_env import RayStartError, ray_head_without_dashboard
from darling_nemo.nemo_rl.user_env import task_section
from darling_nemo.rehearsal.run import rehearse
from darling_nemo.run_folder import DiskFull, RunLocked
from darling_nemo.schema import ConfigError, DarlingConfig, TrlRunConfig
from darling_nemo.schema.trl import check_method_fits, check_task_judge
from darling_nemo.smoke.run import smoke
from darling_nemo.trl import run, validate_trl_config
from darling_nemo.user_rewards import RewardFunctionError

REPO = Path(__file__).resolve().parent.parent
# The NeMo-RL keys this package knows: a nemo_rl config may only use keys found here.


def reference_config_path(repo: Path = REPO) -> Path:
    """The key schema of NeMo-RL's sections, conf/base/common.yaml: the checkout's (editable
    installs, the container), else the copy a wheel carries inside the package
    (pyproject.toml force-includes it), so a non-editable install checks NeMo-RL configs too."""
    in_checkout = repo / "conf" / "base" / "common.yaml"
    if in_checkout.is_file():
        return in_checkout
    return Path(str(files("darling_nemo") / "conf" / "common.yaml"))


REFERENCE_CONFIG = reference_config_path()


@dataclass(frozen=True)
class Recipe:
    """A training recipe: its task and the config it runs on each kind of machine."""

    name: str  # the task registry's name: its NeMo-RL environment, reward model, judge
    recipe: str  # recipes/<file>
    cpu_config: str  # no NeMo-RL or no GPU: the single-machine TRL engine on CPU
    node_config: str  # NeMo-RL and GPUs: one node, no separate classifier node
    cluster_config: str  # the paper's setup, for the hint


def nemo_rl_with_gpus() -> tuple[bool, str]:
    """Whether NeMo-RL is importable and CUDA GPUs are visible, and why not."""
    if importlib.util.find_spec("nemo_rl") is None:
        return False, "NeMo-RL is not importable here"
    import torch

    if not torch.cuda.is_available():
        return False, "NeMo-RL is importable but no CUDA GPU is visible"
    return True, f"NeMo-RL is importable and {torch.cuda.device_count()} CUDA GPU(s) are visible"


def choose_config(recipe: Recipe) -> str:
    """No --config: the task's config for this machine, saying what was chosen and why."""
    gpus, why = nemo_rl_with_gpus()
    chosen = recipe.node_config if gpus else recipe.cpu_config
    print(f"no --config given; {why}: running {chosen}", flush=True)
    if not gpus:
        print(
            f"  (the single-machine TRL engine on CPU, a smoke run of the DARLING path; the paper's "
            f"setup is --config {recipe.cluster_config} on NeMo-RL, docs/nemo-rl-recipes.md)",
            flush=True,
        )
    return chosen


def check_config(recipe: Recipe, cfg: dict) -> TrlRunConfig | DarlingConfig:
    """Every key of the file and of the overrides, before anything starts (ConfigError).

    The one validation of the run: the TRL engine's whole config, or NeMo-RL's `darling:`
    section with its consistency rules (NeMo-RL reads the rest itself); the engine then
    takes the validated config as it is.
    """
    engine = cfg.get("engine")
    if engine == "trl":
        checked = validate_trl_config(cfg)
        check_task_section(checked.task)
        return checked
    elif engine == "nemo_rl":
        darling = validate_nemo_rl_config(cfg, reference=load_config(REFERENCE_CONFIG))
        nemo_rl = tasks.task(recipe.name).nemo_rl  # chat's quality: a reward model's score
        needs_reward_model = nemo_rl is not None and nemo_rl.needs_reward_model
        if cfg["env"]["reward_model"]["enabled"] != needs_reward_model:
            other = "darling_wildchat.py" if not needs_reward_model else "darling_math.py"
            raise ConfigError(
                f"env.reward_model.enabled={str(not needs_reward_model).lower()}: "
                f"this config is for recipes/{other}"
            )
        check_user_task(recipe, cfg, darling)
        return darling
    else:
        raise ConfigError(f"engine: must be nemo_rl or trl, got {engine!r}")


def check_task_section(section: object) -> None:
    """What the section's task checks beyond its keys at --dry-run (`tasks.Task.config_check`:
    a user's reward functions imported and called once on the first row), ConfigError naming
    the key."""
    config_check = tasks.task_of(section).config_check
    if config_check is not None:
        config_check(section)


def check_user_task(recipe: Recipe, cfg: dict, darling: DarlingConfig) -> None:
    """A NeMo-RL config's `task:` section (a task trained from it: a user's reward functions
    or a plugin's task, `tasks.trains_from_section`): the recipe that runs it, its keys, and
    its task's --dry-run checks (reward_funcs: the data file, and every function imported and
    called once on the first prompt), ConfigError naming the key, before Ray or any model."""
    section = task_section(cfg)
    from_section = tasks.trains_from_section(tasks.task(recipe.name))  # trained from task:
    if (section is None) == from_section:
        raise ConfigError(
            f"task: missing: {recipe.recipe} trains a task: section "
            f"(kind: {' | '.join(tasks.section_task_names())})"
            if section is None
            else f"task: this config is for recipes/darling_task.py, not {recipe.recipe}"
        )
    if section is not None:
        try:  # as a TRL config's: its own rule of equivalence; graded: no outcome
            check_task_judge(section, darling, "darling.judge")
            check_method_fits(
                section, darling, cfg["grpo"]["num_generations_per_prompt"], "darling"
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
        check_task_section(section)


def run_task(recipe: Recipe, cfg: dict) -> str:
    """The task a NeMo-RL run trains (the registry's name): its `task:` section's kind where
    it has one (any task trained from a section, a plugin's too), else the recipe's."""
    section = cfg.get("task")
    return tasks.task(str(section["kind"])).name if section else recipe.name


def parser_for(recipe: Recipe, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"uv run {recipe.recipe}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"With no --config: {recipe.node_config} where NeMo-RL is importable and GPUs are "
            f"visible, else {recipe.cpu_config} (TRL engine, CPU, a few minutes).\n"
            f"example: uv run {recipe.recipe} --config {recipe.cluster_config} --dry-run "
            "grpo.max_num_steps=200"
        ),
    )
    parser.add_argument("--config", help="YAML config (conf/*.yaml); default: see below")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--dry-run", action="store_true", help="check and print the config only")
    what.add_argument(
        "--rehearse",
        action="store_true",
        help="run NeMo-RL's whole loop on this CPU with stand-ins for the GPU workers",
    )
    what.add_argument(
        "--smoke",
        action="store_true",
        help="on the job's GPUs: setup, 2 steps, validation, checkpoint, then resume and 1 "
        "step; compared with darling-plan (docs/first-hour.md)",
    )
    parser.add_argument(
        "--smoke-dir",
        help="--smoke's folder: its data subset, checkpoints, logs and report "
        "(default: smoke/<config name>; must hold no checkpoints)",
    )
    parser.add_argument(
        "--memory-report",
        help="--smoke: read the per-phase GPU memory peaks from this JSON-lines file instead "
        "of the workers' own (darling_nemo/smoke/report.py describes the lines)",
    )
    parser.add_argument("overrides", nargs="*", help="a.b=c overrides (strict; +a.b=c adds)")
    return parser


def check_nemo_rl_paths(cfg: dict, darling: DarlingConfig) -> None:
    """What a NeMo-RL run reads, writes and loads on this machine, before NeMo-RL or Ray
    starts: its data files exist, its log and checkpoint folders can be written, and every
    model named as a path is a folder here."""
    from darling_nemo.nemo_rl.adapter import check_data_paths

    check_data_paths(cfg)
    check_output_dir(cfg["logger"]["log_dir"], "logger.log_dir")
    if cfg["checkpointing"]["enabled"]:
        check_output_dir(cfg["checkpointing"]["checkpoint_dir"], "checkpointing.checkpoint_dir")
    check_model_path(cfg["policy"]["model_name"], "policy.model_name")
    check_model_path(cfg["policy"]["tokenizer"]["name"], "policy.tokenizer.name")
    reward_model = cfg["env"]["reward_model"]
    if reward_model["enabled"]:
        check_model_path(reward_model["model_name"], "env.reward_model.model_name")
    if darling.calls_judge:
        check_judge_models(darling.judge)


def run_recipe(recipe: Recipe, description: str, argv: list[str] | None = None) -> int:
    """The recipe as a command: exit code 0 done, 1 the job failed, 2 bad input (one line
    naming the key, file or path), 130 Ctrl-C (docs/errors.md)."""
    started()  # Ctrl-C from here on: KeyboardInterrupt, one line (below)
    args = parser_for(recipe, description).parse_args(argv)
    prog = Path(recipe.recipe).stem
    try:
        return run_parsed(recipe, args)
    except KeyboardInterrupt:  # outside the engines' own handling (they say what is kept)
        kept = NOTHING_TO_RESUME if args.rehearse or args.smoke else "nothing was trained yet"
        return report_interrupt(prog, kept)


def run_parsed(recipe: Recipe, args: argparse.Namespace) -> int:
    """`run_recipe` once the command line is parsed."""
    prog = Path(recipe.recipe).stem

    # 1. Config: the whole file and every override checked before anything starts.
    config_path = args.config or choose_config(recipe)
    try:
        cfg = load_config(config_path, args.overrides)
        checked = check_config(recipe, cfg)
    except ConfigError as err:
        if args.rehearse or args.smoke:  # a rehearsal or smoke always ends with its verdict
            problems = [line.strip() for line in str(err).splitlines()[1:]] or [str(err)]
            what = "rehearsal" if args.rehearse else "smoke"
            print(f"{what}: FAIL at config: {'; '.join(problems)}", flush=True)
        return report_error(prog, f"{config_path}: {err}")

    if (args.smoke_dir is not None or args.memory_report is not None) and not args.smoke:
        return report_error(prog, "--smoke-dir and --memory-report go with --smoke")

    # 2. Rehearsal (NeMo-RL's real loop on CPU) or smoke (the job on its own GPUs, 3 steps).
    if args.rehearse or args.smoke:
        return rehearse_or_smoke(recipe, args, cfg, config_path)
    print(yaml.safe_dump(cfg, sort_keys=False), flush=True)
    if args.dry_run:
        return 0

    # 3. Single machine: the TRL engine; else 4. NeMo-RL.
    if isinstance(checked, TrlRunConfig):
        return run_trl(prog, checked, config_path)
    return run_nemo_rl(recipe, cfg, checked, config_path)


def trl_instead(recipe: Recipe, config_path: str) -> str:
    """What a TRL config offers in place of --rehearse / --smoke."""
    also = "" if Path(config_path) == Path(recipe.cpu_config) else f" ({recipe.cpu_config} is one)"
    return (
        f"a TRL config runs as it is, on this machine: uv run {recipe.recipe} --config "
        f"{config_path} trainer.max_steps=2 is its smoke run{also}"
    )


def rehearse_or_smoke(recipe: Recipe, args: argparse.Namespace, cfg: dict, config_path: str) -> int:
    """--rehearse or --smoke: both for NeMo-RL configs; the rehearsal runs in an environment
    that has NeMo-RL (the plain project environment has not: said in one line, exit 2)."""
    prog = Path(recipe.recipe).stem
    flag = "--rehearse" if args.rehearse else "--smoke"
    if cfg["engine"] != "nemo_rl":
        return report_error(
            prog,
            f"{config_path}: {flag} is for engine: nemo_rl configs; {trl_instead(recipe, config_path)}",
        )
    if args.rehearse:
        if importlib.util.find_spec("nemo_rl") is None:
            return report_error(
                prog,
                "--rehearse runs NeMo-RL's own loop, and NeMo-RL is not installed in this "
                f"environment ({sys.executable}): run .nemo-rl-cpu/bin/python {recipe.recipe} "
                f"--config {config_path} --rehearse (the environment is made once by "
                "containers/nemo_rl_cpu_env.sh; docs/rehearsal.md)",
            )

        return rehearse(REPO / recipe.recipe, config_path, args.overrides, recipe.name)

    smoke_dir = Path(args.smoke_dir or f"smoke/{Path(config_path).stem}")
    memory = Path(args.memory_report) if args.memory_report else None
    return smoke(REPO / recipe.recipe, config_path, args.overrides, recipe.name, smoke_dir, memory)


def run_trl(prog: str, checked: TrlRunConfig, config_path: str) -> int:
    """The TRL engine on this machine; a full disk or a folder another run holds is one line
    and exit 2, Ctrl-C (SIGTERM) one line and exit 130 (143): the step reached, the last
    complete checkpoint, the same command resumes."""
    try:
        print(run(checked))
    except (DiskFull, RunLocked) as err:  # they name their folder themselves
        return report_error(prog, err)
    except ConfigError as err:  # what only the run can see (a data file, a model path)
        return report_error(prog, f"{config_path}: {err}")
    except RewardFunctionError as err:  # the job failed on a user's function: exit 1
        close_bars()  # the trainer's bar, left open by the raise, ends its line first
        print(f"{prog}: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt as err:  # `run` says what it kept once training began
        return report_interrupt(
            prog,
            str(err)
            or f"the checkpoints saved so far are in {checked.output_dir}; "
            "the same command resumes from the newest",
        )
    return 0


def run_nemo_rl(recipe: Recipe, cfg: dict, checked: DarlingConfig, config_path: str) -> int:
    """NeMo-RL (where it is not installed: how to run it), then this machine's paths, the
    one-node configs' own classifier server (darling.judge.launch: started here, stopped
    when the run ends however it ends) and a served judge's probe; nothing is written
    before. Then the prompts, the task's quality environment and NeMo-RL's setup() +
    grpo_train() with the DARLING reward after every rollout."""
    from darling_nemo.nemo_rl import adapter as nemo

    prog = Path(recipe.recipe).stem
    with ExitStack() as services:
        try:
            nemo.require_nemo_rl(f"uv run {recipe.recipe} --config {config_path}")
            check_nemo_rl_paths(cfg, checked)
            cfg, checked = start_node_judge(cfg, checked, services)
            ray_log = Path(cfg["logger"]["log_dir"]) / "ray_head.log"
            services.enter_context(ray_head_without_dashboard(ray_log))  # where none runs
            # served judge probed, numbered log dir, Ray, tokenizer, generation config
            cfg, tokenizer = nemo.start(cfg, checked)
        except (NodeServerError, RayStartError) as err:  # a server did not start: job failed
            print(f"{prog}: {err}", file=sys.stderr, flush=True)
            return 1
        except (ConfigError, JudgeError) as err:
            return report_error(prog, f"{config_path}: {err}")
        except KeyboardInterrupt:
            return report_interrupt(prog, "nothing was trained yet")
        save_config(cfg, Path(cfg["logger"]["log_dir"]) / "config.yaml")
        task = run_task(recipe, cfg)  # the section's kind: its judge, data and environment
        data = nemo.setup_data(tokenizer, cfg, task)
        try:
            nemo.train(cfg, tokenizer, data, checked, task=task)
        except nemo.DriverFailed as failed:
            print(failed, file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            return report_interrupt(
                prog,
                "NeMo-RL's checkpoints saved so far are in "
                f"{cfg['checkpointing']['checkpoint_dir']}; the same command resumes from the "
                "newest",
            )
    return 0
