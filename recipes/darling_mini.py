"""The miniature: GRPO and DARLING side by side on a small task (the routes task by default,
the dice task in conf/mini/dice*.yaml), on CPU, in minutes.

    uv run recipes/darling_mini.py                                  # conf/mini/default.yaml
    uv run recipes/darling_mini.py --config conf/mini/dice_k.yaml trainer.max_steps=50

Reads top to bottom: load and validate the config; for every seed, warm-start one tiny
policy and train every arm from it with TRL, same seed and settings (only the `darling:`
section differs; `workers` arm runs at once); then print and save the comparison table and
the plots. Outputs go to
`output_dir` (default runs/mini): seed-<s>/warm_start, seed-<s>/<arm> (checkpoints, logs,
eval_history.jsonl), comparison.md/.json, curves.png, pass_at_k.png, wall_time.json (the
seconds of every invocation: a rerun reports the total, not only its own). Rerunning the
same command after a kill continues: finished warm starts and arms are reused, an
unfinished arm resumes from its newest checkpoint. Rerunning with settings that change results
(e.g. trainer.learning_rate=...) into the same output_dir is refused, naming the keys:
pick a new output_dir. (Logging, threads and checkpoint frequency may change.)
"""

from __future__ import annotations

from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "darling_mini")

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch

from darling_nemo.config import check_output_dir, exits_on_config_error, load_config, save_config
from darling_nemo.manifest import check, damaged_words, write_manifest
from darling_nemo.mini import report
from darling_nemo.mini.plots import figure_title, plot_curves, plot_pass_at_k
from darling_nemo.mini.reproducibility import pin_cpu_kernels, run_conditions
from darling_nemo.mini.warm_start import MiniatureTask, warm_start
from darling_nemo.resume import changed_settings, write_json
from darling_nemo.run_folder import run_lock
from darling_nemo.schema import ConfigError, DarlingConfig, MiniConfig, validate_section
from darling_nemo.tasks import Prompts, task_of
from darling_nemo.trl.mini_arms import run_arms
from darling_nemo.trl.policy import tiny_policy, word_tokenizer
from darling_nemo.trl.run import check_resume_config

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "mini" / "default.yaml"
WARM_START_SETTINGS = "warm_start_settings.json"  # what a warm start was made with


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="YAML config")
    parser.add_argument("overrides", nargs="*", help="a.b=c overrides (strict; +a.b=c adds)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 deprecations in TRL

    # 1. Config: every key validated before anything runs.
    try:
        raw = load_config(args.config, args.overrides)
        cfg = validate_section(MiniConfig, raw)
    except ConfigError as err:
        raise ConfigError(f"{args.config}: {err}") from None
    out = Path(cfg.output_dir)
    check_output_dir(out)
    started = time.perf_counter()
    try:  # before torch computes anything: it picks its kernels once
        for warning in pin_cpu_kernels(cfg.cpu_kernels):
            print(f"warning: {warning}", file=sys.stderr)
    except ConfigError as err:
        raise ConfigError(f"{args.config}: {err}") from None
    if cfg.torch_threads is not None:
        torch.set_num_threads(cfg.torch_threads)
    entry = task_of(cfg.task)  # the schema admits only tasks with a miniature
    assert entry.prompts is not None and entry.miniature is not None
    prompts = entry.prompts(cfg)
    mini_task = entry.miniature(cfg.task, cfg.warm_start)
    prompt_words = max(len(row["prompt"].split()) for row in prompts.train + prompts.heldout)
    max_positions = prompt_words + cfg.trainer.max_completion_length

    # 2. Reuse only what was made with these settings: a warm start or arm made with other
    # settings is refused (naming the keys) before anything trains, never mixed in.
    try:
        for seed in cfg.seeds:
            check_warm_start(
                out / f"seed-{seed}" / "warm_start", warm_start_settings(cfg, seed, max_positions)
            )
            for name in cfg.arms:
                check_resume_config(cfg.arm_run(seed, name))
    except ConfigError as err:
        raise ConfigError(f"{args.config}: {err}") from None
    with run_lock(out):  # one run per folder: a second one stops here, exit 2
        return train_and_report(cfg, raw, out, prompts, mini_task, max_positions, started)


def train_and_report(
    cfg: MiniConfig,
    raw: dict,
    out: Path,
    prompts: Prompts,
    mini_task: MiniatureTask,
    max_positions: int,
    started: float,
) -> dict:
    """Steps 3-5 of `main`, holding the output folder's run lock."""
    save_config(raw, out / "config.yaml")
    wall = report.WallTime(out, started)  # this invocation's seconds add to what earlier ones spent

    per_arm: dict[str, dict[int, dict[str, float]]] = {name: {} for name in cfg.arms}
    # One seed at a time, or every seed's warm start first when arm runs go to workers.
    batches = [[seed] for seed in cfg.seeds] if cfg.workers == 1 else [list(cfg.seeds)]
    for batch in batches:
        # 3. Warm start: one tiny policy per seed, unsure but capable, shared by every arm.
        for seed in batch:
            warm_dir = out / f"seed-{seed}" / "warm_start"
            if not intact_warm_start(warm_dir):
                make_warm_start(cfg, seed, prompts, mini_task, max_positions, warm_dir)
                wall.save(time.perf_counter())

        # 4. One TRL run per arm: same seed, policy, task, trainer and evaluation settings.
        for seed, name in run_arms(cfg, [(seed, name) for seed in batch for name in cfg.arms]):
            run_dir = out / f"seed-{seed}" / name
            per_arm[name][seed] = report.arm_summary(run_dir, cfg.evaluation.pass_at_k)
            wall.save(time.perf_counter())
    per_arm = {name: {seed: per_arm[name][seed] for seed in cfg.seeds} for name in cfg.arms}
    warm: dict[int, dict[str, float]] = {}
    for seed in cfg.seeds:
        first_run = out / f"seed-{seed}" / next(iter(cfg.arms)) / "eval_history.jsonl"
        warm[seed] = json.loads(first_run.read_text().splitlines()[0])  # step 0 = the warm start

    # 5. Report: mean ± std over seeds (printed and saved), per-seed differences, figures.
    seconds = wall.save(time.perf_counter())
    note = report.wall_time_note(
        seconds["wall_seconds"], seconds["wall_seconds_this_run"], wall.earlier_runs
    )
    write_report(cfg, out, mini_task, per_arm, warm, seconds, note)
    return {"arms": per_arm, "warm_start": warm, **seconds}


def warm_start_settings(cfg: MiniConfig, seed: int, max_positions: int) -> dict:
    """Everything a seed's warm start depends on; saved next to it."""
    return {
        "seed": seed,
        "max_positions": max_positions,
        **cfg.model_dump(
            mode="json",
            include={"policy", "warm_start", "cpu_kernels"},
        ),
        # the training judge's keys: the warm start is supervised, it asks no judge
        "task": cfg.task.model_dump(mode="json", exclude=set(type(cfg.task).judge_keys)),
        "optimizer": cfg.trainer.optimizer,
    }


def make_warm_start(
    cfg: MiniConfig,
    seed: int,
    prompts: Prompts,
    mini_task: MiniatureTask,
    max_positions: int,
    warm_dir: Path,
) -> None:
    """Trains one seed's tiny policy from scratch and saves it (and its settings) to warm_dir:
    written as warm_dir.partial and renamed when whole, so a kill or a full disk never
    leaves a warm start that a rerun would take for finished."""
    partial = warm_dir.with_name(warm_dir.name + ".partial")
    for unfinished in (partial, warm_dir):  # warm_dir without its model: an earlier version's
        if unfinished.exists():
            print(f"skipping incomplete {unfinished} (a warm start that did not finish): removed")
            shutil.rmtree(unfinished)
    partial.mkdir(parents=True)
    write_json(partial / WARM_START_SETTINGS, warm_start_settings(cfg, seed, max_positions))
    assert prompts.vocabulary is not None  # a miniature's task writes words
    tokenizer = word_tokenizer(prompts.vocabulary)
    torch.manual_seed(seed)
    model = tiny_policy(tokenizer, cfg.policy, max_positions)
    losses = warm_start(
        model,
        tokenizer,
        mini_task.warm_start(seed),
        steps=cfg.warm_start.steps,
        batch_size=cfg.warm_start.batch_size,
        learning_rate=cfg.warm_start.learning_rate,
        seed=seed,
        optimizer=cfg.trainer.optimizer,
        progress=cfg.logging.progress_bar,
    )
    print(f"seed {seed}: warm start {len(losses)} steps, last loss {losses[-1]:.3f}")
    tokenizer.save_pretrained(partial)
    model.save_pretrained(partial)
    write_manifest(partial)  # last: a warm start with it was written whole
    partial.rename(warm_dir)


def intact_warm_start(warm_dir: Path) -> bool:
    """Whether a finished warm start is there to reuse: one whose files differ from its
    manifest is said in one line, moved aside (never deleted) and trained again."""
    if not (warm_dir / "config.json").is_file():
        return False
    verdict = check(warm_dir)
    if verdict.problem:
        print(f"{damaged_words(warm_dir, verdict.problem)}; it is trained again", flush=True)
        return False
    return True


def write_report(
    cfg: MiniConfig,
    out: Path,
    mini_task: MiniatureTask,
    per_arm: dict[str, dict[int, dict[str, float]]],
    warm: dict[int, dict[str, float]],
    seconds: dict[str, float],
    wall_note: str,
) -> None:
    """comparison.md/.json (with the run's conditions), curves.png and pass_at_k.png."""
    names = sorted(
        {key.split("/")[0] for summary in warm.values() for key in summary if "/pass@" in key}
    )
    strata = [f"{name}/pass@{k}" for name in names for k in cfg.evaluation.pass_at_k]
    metrics = [
        *(f"pass@{k}" for k in cfg.evaluation.pass_at_k),
        "distinct_correct",
        "distinct_all",
        *strata,
    ]
    rows = {report.WARM_START_ROW: {m: report.mean_and_std(warm, m) for m in metrics}}
    for name, per_seed in per_arm.items():
        rows[name] = {
            m: report.mean_and_std(per_seed, m) for m in [*metrics, "train_diversity_mean"]
        }
    table = report.format_table(rows, [*metrics, "train_diversity_mean"])
    gaps = report.differences(per_arm, cfg.differences)
    if cfg.judge_accuracy:  # the judge sweep: the gains again, by the judge's accuracy
        accuracy = {
            name: cfg.arm_task(name).judge_accuracy if asks_judge(darling) else None
            for name, darling in cfg.arms.items()
        }
        gaps += [
            "",
            "Gain by the training judge's accuracy (evaluation counts answers exactly):",
            "",
            report.gains_by_judge_accuracy(per_arm, accuracy, cfg.differences),
        ]
    conditions = run_conditions()  # after training: the thread count the runs really used
    note = (
        f"{mini_task.heldout_note}, {cfg.evaluation.num_samples} samples per prompt "
        f"at temperature {cfg.evaluation.temperature}; mean ± std over seeds {cfg.seeds}; "
        f"{cfg.trainer.max_steps} steps per arm; {wall_note}.\n"
        "Conditions (the numbers are bit-identical only under the same ones): "
        + ", ".join(f"{key} {value}" for key, value in conditions.items())
        + "."
    )
    text = "\n".join([table, "", note, "", *gaps])
    print(f"\n{text}")
    (out / "comparison.md").write_text(text + "\n")
    summary = {"arms": per_arm, "warm_start": warm, **seconds, "conditions": conditions}
    (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n")
    title = figure_title(cfg, mini_task.title)
    plot_curves(
        {name: [out / f"seed-{s}" / name for s in cfg.seeds] for name in cfg.arms},
        out / "curves.png",
        title,
    )
    plot_pass_at_k(per_arm, warm, cfg.evaluation.pass_at_k, out / "pass_at_k.png", title)
    print(f"saved {out / 'comparison.md'}, {out / 'curves.png'}, {out / 'pass_at_k.png'}")


def asks_judge(darling: DarlingConfig) -> bool:
    """Whether an arm's training asks the pair judge (GRPO does not)."""
    return darling.enabled and darling.calls_judge


def check_warm_start(warm_dir: Path, settings: dict) -> None:
    """Refuse a saved warm start made with other settings (naming the keys that differ)."""
    saved = warm_dir / WARM_START_SETTINGS
    if saved.is_file():
        changes = changed_settings(json.loads(saved.read_text()), settings)
        if changes:
            raise ConfigError(
                f"{warm_dir} holds a warm start made with other settings:\n  "
                + "\n  ".join(changes)
                + f"\nUse another output_dir, or delete {warm_dir.parent} to start over."
            )
    elif (warm_dir / "config.json").is_file():
        raise ConfigError(
            f"{warm_dir} holds a warm start without {WARM_START_SETTINGS}, so its settings "
            f"are unknown: delete {warm_dir.parent} (or use another output_dir)"
        )


@exits_on_config_error(
    "darling_mini",
    on_interrupt=(
        "finished warm starts and arms and each unfinished arm's newest checkpoint are saved "
        "in output_dir; the same command resumes from them"
    ),
)
def command(argv: list[str] | None = None) -> int:
    """`main` as a command: a bad config one line and exit 2, Ctrl-C exit 130."""
    main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(command())
