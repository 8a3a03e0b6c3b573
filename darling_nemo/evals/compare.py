"""Compare training runs: export each run's checkpoint, evaluate it on the task's benchmarks
with the paper's settings, and write one table and the figures (recipes/compare_runs.py).

Every run is exported and verified before the first evaluation starts, so a bad run fails
in seconds, not after the other runs' evaluations. Each evaluation is the eval recipe itself
(a child process, the command printed first), with run=RUN_DIR step=N: the summaries record
the run, step and training config, and rerunning the comparison resumes them.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from darling_nemo import tasks
from darling_nemo.evals.plots import make_report
from darling_nemo.export import LATEST, Checkpoint, export_checkpoint, find_checkpoint
from darling_nemo.schema import ConfigError


def task_evals() -> dict[str, dict[str, str]]:
    """Each task's evaluations (eval name -> config), asked of the task registry when called,
    so a task registered from outside the package is there too (its older spellings too)."""
    return {
        name: dict(entry.evaluations)
        for entry in map(tasks.task, tasks.task_names())
        if entry.evaluations
        for name in (entry.name, *entry.aliases)
    }


def evals_of(task_name: str) -> dict[str, str]:
    """A task's evaluations; a task without any is a ConfigError naming those that have."""
    found = task_evals()
    if task_name not in found:
        raise ConfigError(
            f"TASK={task_name}: no evaluations for this task (tasks with evaluations: "
            f"{', '.join(sorted(found))})"
        )
    return found[task_name]


# The paper's settings are the eval configs' defaults (conf/eval/*.yaml, schema.py), but for
# NoveltyBench's mode: the leaderboard's by default, the paper's with noveltybench:mode=darling.
RECIPES = {
    "math": "recipes/eval_math.py",
    "noveltybench": "recipes/eval_noveltybench.py",
    "creative": "recipes/eval_creative.py",
}


def parse_pairs(pairs: Sequence[str], what: str) -> dict[str, list[str]]:
    """`NAME=VALUE` (--eval) or `NAME:KEY=VALUE` (--set) strings grouped by eval name."""
    out: dict[str, list[str]] = {}
    sep = "=" if what == "--eval" else ":"
    for pair in pairs:
        name, _, rest = pair.partition(sep)
        if name not in RECIPES or not rest:
            form = "NAME=CONFIG" if what == "--eval" else "NAME:KEY=VALUE"
            raise ConfigError(f"{what} {pair!r}: expected {form} with NAME in {sorted(RECIPES)}")
        out.setdefault(name, []).append(rest)
    return out


def eval_commands(
    ckpt: Checkpoint, evals: dict[str, str], sets: dict[str, list[str]], out_dir: Path
) -> list[list[str]]:
    name = f"{ckpt.run_name}-step_{ckpt.step}"
    return [
        [
            sys.executable,
            RECIPES[kind],
            "--config",
            config,
            f"run={ckpt.run_dir}",
            f"step={ckpt.step}",
            f"run_name={name}",
            f"output_dir={out_dir / name / kind}",
            *sets.get(kind, []),
        ]
        for kind, config in evals.items()
    ]


def runs_table(ckpts: Sequence[Checkpoint]) -> str:
    lines = ["| run | step | training config | base model |", "|---|---|---|---|"]
    for c in ckpts:
        lines.append(
            f"| {c.run_name}-step_{c.step} | {c.step} | {c.step_dir / 'config.yaml'} | "
            f"{c.model_name} |"
        )
    return "\n".join(lines)


def compare_runs(
    runs: Sequence[str],
    out_dir: str | Path,
    evals: dict[str, str],
    sets: dict[str, list[str]],
    step: int | str = LATEST,
    dry_run: bool = False,
) -> dict[str, Any]:
    out = Path(out_dir)
    ckpts = [find_checkpoint(r, step) for r in runs]
    names = [f"{c.run_name}-step_{c.step}" for c in ckpts]
    if len(set(names)) != len(names):
        raise ConfigError(f"two runs share a name {names}: give run folders with different names")
    for c in ckpts:  # all exported and verified before any evaluation starts
        print(f"+ export {c.step_dir}", flush=True)
        if not dry_run:
            print(f"  {export_checkpoint(c)}", flush=True)
    for c in ckpts:
        for cmd in eval_commands(c, evals, sets, out):
            print("+ " + shlex.join(cmd), flush=True)
            if not dry_run:
                done = subprocess.run(cmd, check=False)
                if done.returncode != 0:
                    raise ConfigError(f"{cmd[1]} for {c.step_dir} failed (exit {done.returncode})")
    if dry_run:
        return {}
    written = make_report([out / n for n in names], out / "report")
    runs = runs_table(ckpts)
    report = written["report"]
    report.write_text(report.read_text().replace("\n", f"\n\n## Runs\n\n{runs}\n", 1))
    return {**written, "runs": runs}


if __name__ == "__main__":  # slurm/compare.sub: `python -m darling_nemo.evals.compare TASK`
    try:
        for eval_name, config in evals_of(sys.argv[1]).items():
            print(f"{eval_name}={config}")
    except ConfigError as err:
        print(f"darling: error: {err}", file=sys.stderr)
        sys.exit(2)
