"""`recipes/darling_*.py --config X [overrides] --smoke`: the job on its own GPUs, briefly.

The recipe runs twice, each a fresh process as the user starts it, with the job's config and
overrides and real workers (Megatron, vLLM, the reward model, the served classifiers, on the
job's layout and node count). Only three things change, printed as `smoke key: from -> to`:
  dataset -- the first 3 x grpo.num_prompts_per_step prompts of data.train_data_path, and
             grpo.max_val_samples at one validation batch;
  steps   -- grpo.max_num_steps 2 then 3; grpo.val_period 2 (where the config validates);
  folders -- checkpointing.checkpoint_dir and logger.log_dir under the smoke's folder (never
             the real run's).
Phases: run 1 (setup, steps 1-2, validation, checkpoint, stop), run 2 (resume from step 2,
step 3, checkpoint), each checked by the rehearsal's own checker (rehearsal/phases.py); then
memory and times against the plan (report.py). Last line `smoke: PASS` or
`smoke: FAIL at <phase>: <error>`; exit status 0 only on PASS.

`standins=True` (tests, CPU) runs the same sequence inside the rehearsal's world: tiny
models, the shrunk config, a private Ray with fake GPUs and the stand-in workers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from darling_nemo.config import load_config, save_config
from darling_nemo.judges.registry import judge_kind
from darling_nemo.nemo_rl.judging_plan import JudgingPlan, judging_plan
from darling_nemo.nemo_rl.memory_probe import MEMORY_REPORT_ENV
from darling_nemo.plan.cli import detect_gpu_memory_gib
from darling_nemo.plan.estimate import STANDARD_GPUS, make_plan
from darling_nemo.ports import free_port
from darling_nemo.rehearsal.contract import contract_phase
from darling_nemo.rehearsal.phases import (
    GPU_PROB_ERROR_TOLERANCE,
    REHEARSAL_PROB_ERROR_TOLERANCE,
    Expect,
    RehearsalFailure,
    verify_run,
)
from darling_nemo.rehearsal.run import (
    Rehearsal,
    prepare,
    run_recipe_once,
    start_judge_server,
    start_ray,
)
from darling_nemo.rehearsal.shrink import lookup
from darling_nemo.schema import ConfigError, validate_darling
from darling_nemo.smoke import report

REPO = Path(__file__).resolve().parents[2]
STEPS_PER_SMOKE = 3  # run 1 trains 2, run 2 one more
STANDIN_RUN_TIMEOUT_S = 900  # the rehearsal's bound per run; on GPUs the job's time limit

RUNS = (  # (phase, grpo.max_num_steps, trained steps, resumed)
    ("run 1 (setup, steps 1-2, validation, checkpoint, stop)", 2, (1, 2), False),
    ("run 2 (resume from step 2, step 3, checkpoint)", 3, (3,), True),
)


def smoke_overrides(
    cfg: dict[str, Any], smoke_dir: Path, train_data: Path
) -> list[tuple[str, Any]]:
    """(key path, new value): the smoke's dataset, steps and folders; the rest is the job's."""
    grpo = cfg["grpo"]
    out: list[tuple[str, Any]] = [
        ("data.train_data_path", str(train_data)),
        ("checkpointing.enabled", True),
        ("checkpointing.checkpoint_dir", str(smoke_dir / "checkpoints")),
        ("logger.log_dir", str(smoke_dir / "logs")),
    ]
    if grpo["val_period"] > 0:
        if grpo["val_period"] != 1:
            out.append(("grpo.val_period", 2))
        out.append(("grpo.max_val_samples", min(grpo["max_val_samples"], grpo["val_batch_size"])))
    return [(key, value) for key, value in out if lookup(cfg, key) != value]


def train_subset(source: str, out: Path, rows: int) -> Path:
    """The first `rows` prompts of the job's own data file (darling-prep-* output)."""
    path = Path(source)
    if not path.is_file():
        raise ConfigError(
            f"data.train_data_path={source}: not a file here; the smoke takes its first "
            f"{rows} prompts from the job's prepared data (darling-prep-*)"
        )
    lines = [line for line in path.read_text().splitlines() if line.strip()][:rows]
    if len(lines) < rows:
        raise ConfigError(
            f"data.train_data_path={source}: {len(lines)} prompts; the smoke's "
            f"{STEPS_PER_SMOKE} steps need {rows}"
        )
    out.write_text("\n".join(lines) + "\n")
    return out


def plan_lines(
    given: dict[str, Any], memory_report: Path | None, default_report: Path
) -> tuple[list[str], list[dict[str, Any]]]:
    """The memory table: darling-plan of the job's config against the memory report."""
    path = memory_report or default_report
    source = str(memory_report) if memory_report else "the policy workers' torch peaks"
    if not path.is_file():
        return [f"memory: not measured (no report at {path})"], []
    measured = report.read_memory_report(path)
    capacity = detect_gpu_memory_gib() or STANDARD_GPUS["80 GB (H100)"]
    try:
        plan = make_plan(given, capacity)
    except ConfigError as err:
        return [f"memory: no plan for this config ({err})"], []
    rows = report.compare(plan.phases, measured)
    data = [
        {
            "phase": r.phase,
            "plan_gib": r.plan_gib,
            "measured_gib": r.measured_gib,
            "difference": r.difference,
        }
        for r in rows
    ]
    return report.memory_lines(rows, source), data


def smoke(
    recipe: Path,
    config_path: str,
    overrides: list[str],
    task: str,
    smoke_dir: Path,
    memory_report: Path | None = None,
    standins: bool = False,
    before_run_2: Callable[[Path], None] | None = None,
) -> int:
    """The whole smoke; returns the exit status: 0 PASS, 1 a phase failed, 2 bad input.

    memory_report: a report to read instead of the probe's (the CPU tests inject one).
    before_run_2: called with the checkpoint folder between the runs (failure drills)."""
    started = time.monotonic()
    smoke_dir = smoke_dir.resolve()
    print(f"smoke of {config_path} {' '.join(overrides)} in {smoke_dir}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    lines: list[str] = []
    data: dict[str, Any] = {"config": config_path, "overrides": overrides}
    phase = "prepare"
    try:
        if any((smoke_dir / "checkpoints").glob("step_*")):
            raise ConfigError(
                f"--smoke-dir {smoke_dir}: its checkpoints/ already holds steps; a smoke "
                "starts at step 0 (remove the folder or give another --smoke-dir)"
            )
        smoke_dir.mkdir(parents=True, exist_ok=True)
        given = load_config(config_path, overrides)

        phase = "contract"
        contract_phase(config_path, overrides)  # the rehearsal's first phase, before anything
        phase = "prepare"
        with ExitStack() as stack:
            world = _world(recipe, config_path, overrides, task, smoke_dir, standins, stack)
            cfg, config = _smoke_config(world, smoke_dir)
            plan = judging_plan(cfg, validate_darling(cfg["darling"]))
            run_scalars = _both_runs(
                recipe, config, cfg, plan, world, smoke_dir, data, before_run_2
            )
        phase = "report"
        memory, data["memory"] = plan_lines(given, memory_report, smoke_dir / "memory.jsonl")
        mode = report.judge_mode(plan.log_probs.on, plan.generation.on)
        lines = memory + report.time_lines(run_scalars[0], 2, task, mode)
        data["step_2_times_s"] = report.step_times(run_scalars[0], 2)
        for line in lines:
            print(line, flush=True)
    except ConfigError as err:  # bad input (a data file, no NeMo-RL): exit 2
        first, *rest = str(err).splitlines()
        for line in rest:  # what to do instead, above the one-line verdict
            print(line, flush=True)
        return _verdict(smoke_dir, lines, data, f"smoke: FAIL at {phase}: {first}", 2)
    except RehearsalFailure as failure:
        return _verdict(
            smoke_dir, lines, data, f"smoke: FAIL at {failure.phase}: {failure.error}", 1
        )
    except Exception as err:  # anything unforeseen is still one clear line
        return _verdict(
            smoke_dir, lines, data, f"smoke: FAIL at {phase}: {type(err).__name__}: {err}", 1
        )
    elapsed = time.monotonic() - started
    return _verdict(
        smoke_dir, lines, data, f"smoke: PASS ({elapsed:.0f} s; report in {smoke_dir})", 0
    )


@dataclass(frozen=True)
class _World:
    """Where the smoke's runs happen: the config file and overrides they start from, their
    environment, the time limit of each run, and how run 2's resume shows and how close
    generation and training must agree."""

    base_path: str
    base_overrides: list[str]
    env: dict[str, str]
    timeout: float | None
    resume_marker: str | None
    tolerance: float


def _world(
    recipe: Path,
    config_path: str,
    overrides: list[str],
    task: str,
    smoke_dir: Path,
    standins: bool,
    stack: ExitStack,
) -> _World:
    """The rehearsal's stand-in world (CPU tests), or the job's own GPUs and config."""
    if standins:
        base_path, base_overrides, env, timeout = _standin_world(
            recipe, config_path, overrides, task, stack
        )
        marker, tolerance = "weights read back", REHEARSAL_PROB_ERROR_TOLERANCE
        return _World(base_path, base_overrides, env, timeout, marker, tolerance)
    from darling_nemo.nemo_rl.adapter import require_nemo_rl

    require_nemo_rl(f"uv run {recipe.relative_to(REPO)} --config {config_path} --smoke")
    env = dict(os.environ)
    env[MEMORY_REPORT_ENV] = str(smoke_dir / "memory.jsonl")
    (smoke_dir / "memory.jsonl").unlink(missing_ok=True)  # an earlier attempt's
    return _World(config_path, list(overrides), env, None, None, GPU_PROB_ERROR_TOLERANCE)


def _smoke_config(world: _World, smoke_dir: Path) -> tuple[dict[str, Any], Path]:
    """The smoke's dataset, steps and folders over the job's config (printed), written to
    the smoke folder. Returns (the config, its file)."""
    base = load_config(world.base_path, world.base_overrides)
    rows = STEPS_PER_SMOKE * base["grpo"]["num_prompts_per_step"]
    subset = train_subset(base["data"]["train_data_path"], smoke_dir / "train.jsonl", rows)
    changes = smoke_overrides(base, smoke_dir, subset)
    for key, value in changes:
        print(f"  smoke {key}: {lookup(base, key)!r} -> {value!r}", flush=True)
    print(
        f"  smoke grpo.max_num_steps: {base['grpo']['max_num_steps']!r} -> "
        f"{RUNS[0][1]} (run 1), {RUNS[1][1]} (run 2)",
        flush=True,
    )
    cfg = load_config(
        world.base_path, [*world.base_overrides, *(f"{k}={json.dumps(v)}" for k, v in changes)]
    )
    config = smoke_dir / "smoke_config.yaml"
    save_config(cfg, config)
    print("phase prepare (data subset, smoke config): PASS", flush=True)
    return cfg, config


def _both_runs(
    recipe: Path,
    config: Path,
    cfg: dict[str, Any],
    plan: JudgingPlan,
    world: _World,
    smoke_dir: Path,
    data: dict[str, Any],
    before_run_2: Callable[[Path], None] | None,
) -> list[dict[str, dict[int, float]]]:
    """Run 1 and run 2 (the resume), each checked by the rehearsal's checker; their times go
    into `data`. Returns each run's scalars."""
    ckpts = smoke_dir / "checkpoints"
    run_scalars = []
    for phase, steps, trained, resumed in RUNS:
        if resumed and before_run_2 is not None:
            before_run_2(ckpts)
        t0 = time.monotonic()
        log = smoke_dir / f"run{len(run_scalars) + 1}.log"
        text = run_recipe_once(recipe, config, steps, world.env, log, phase, world.timeout)
        val_period = cfg["grpo"]["val_period"]
        expect = Expect(
            trained=trained,
            validated=tuple(s for s in trained if val_period and s % val_period == 0),
            resumed=resumed,
            resume_marker=world.resume_marker,
            prob_error_tolerance=world.tolerance,
        )
        logs = smoke_dir / "logs"
        run_scalars.append(verify_run(text, cfg, phase, logs, ckpts, expect, plan))
        print(f"phase {phase}: PASS ({time.monotonic() - t0:.0f} s)", flush=True)
        data[f"run{len(run_scalars)}_s"] = round(time.monotonic() - t0, 1)
    return run_scalars


def _verdict(
    smoke_dir: Path, lines: list[str], data: dict[str, Any], verdict: str, code: int
) -> int:
    """The report files (also of a failed smoke: what was measured so far), then the line."""
    data["verdict"] = verdict
    report.write_report(smoke_dir, [*lines, verdict], data)
    print(verdict, flush=True)
    return code


def _standin_world(
    recipe: Path, config_path: str, overrides: list[str], task: str, stack: ExitStack
) -> tuple[str, list[str], dict[str, str], float]:
    """The rehearsal's world for a CPU smoke: tiny models and the shrunk config (printed),
    the served judge's classifier on 127.0.0.1, a private Ray with fake GPUs, the stand-in
    workers on every process's path. Returns (config, overrides, env, timeout per run)."""
    # Ray's socket paths must stay short: the world lives in /tmp, not in the smoke folder.
    workdir = Path(tempfile.mkdtemp(prefix="darling-smoke-standins-", dir="/tmp"))
    r = Rehearsal(recipe, config_path, list(overrides), task, workdir)
    judge_port = free_port()
    shrunk_path, _, shrunk = prepare(r, f"http://127.0.0.1:{judge_port}")
    if judge_kind(shrunk["darling"]["judge"]["kind"]).stand_in.serves:
        start_judge_server(r, stack, judge_port, None)
    start_ray(r, stack, shrunk["cluster"]["gpus_per_node"] * shrunk["cluster"]["num_nodes"])
    print(f"phase stand-ins (rehearsal world in {workdir}): PASS", flush=True)
    return str(shrunk_path), [], r.env, STANDIN_RUN_TIMEOUT_S
