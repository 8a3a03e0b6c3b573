"""The miniature's arm runs, one after another or `workers` at a time in their own processes.

Every arm run is a TRL run of its own (its seed, its warm start, its folder, its checkpoints),
so running several at once changes no number: each worker process pins the same CPU kernels
and torch threads before it computes anything, and a run's random streams are seeded by the
run itself. What changes is the wall time (2 workers on 2 cores: about half) and the console:
a worker's progress bars are off, and a line says when each run ends.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

import torch

from darling_nemo.mini.reproducibility import pin_cpu_kernels
from darling_nemo.schema import MiniConfig
from darling_nemo.trl.run import run

Job = tuple[int, str]  # (seed, arm)


def run_arms(cfg: MiniConfig, jobs: Sequence[Job]) -> Iterator[Job]:
    """Run every (seed, arm) of `jobs`, yielding each as it finishes (in order with 1 worker)."""
    if cfg.workers == 1 or len(jobs) == 1:
        for seed, name in jobs:
            print(f"\n=== seed {seed}, arm {name!r} -> {cfg.seed_dir(seed) / name}", flush=True)
            run(cfg.arm_run(seed, name))
            yield seed, name
        return
    context = multiprocessing.get_context("spawn")  # no torch state copied from this process
    with ProcessPoolExecutor(
        max_workers=cfg.workers,
        mp_context=context,
        initializer=prepare_worker,
        initargs=(cfg.cpu_kernels, cfg.torch_threads),
    ) as pool:
        pending: dict[Future, Job] = {}
        for seed, name in jobs:
            run_cfg = cfg.arm_run(seed, name)
            quiet = run_cfg.model_copy(
                update={"logging": run_cfg.logging.model_copy(update={"progress_bar": False})}
            )
            pending[pool.submit(run, quiet)] = (seed, name)
        print(f"\n=== {len(jobs)} arm runs, {cfg.workers} at a time", flush=True)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                seed, name = pending.pop(future)
                future.result()  # a failed run raises here, naming itself in its own message
                print(f"=== seed {seed}, arm {name!r}: done", flush=True)
                yield seed, name


def prepare_worker(cpu_kernels: str, torch_threads: int | None) -> None:
    """In a new worker, before it computes anything: the parent's kernels and threads."""
    for warning in pin_cpu_kernels(cpu_kernels):
        print(f"warning: {warning}", file=sys.stderr)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
