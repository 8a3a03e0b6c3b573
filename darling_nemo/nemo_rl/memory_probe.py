"""`--smoke`'s GPU memory probe: each phase's peak on the policy's workers, as JSON lines.

NeMo-RL v0.4.0 logs GPU memory only as node-level samples of Ray's metrics
(RayGpuMonitorLogger, `ray/node.N.gpu.M.mem_gb`, on a timer, not per phase) and prints
`memory_allocated` around the refit; it keeps no per-phase peak. Its policy workers do have
`reset_peak_memory_stats()` and `get_gpu_info()` (torch.cuda.max_memory_allocated), so the
driver resets every worker's peak before `Policy.train` / `get_logprobs` /
`get_reference_policy_logprobs` and reads it after: one line per phase and step,
{"phase": "training" | "logprobs", "step": n, "peak_gib": largest over workers, "workers": k}.
darling_nemo/smoke/report.py reads the file. Off unless DARLING_MEMORY_REPORT names it (the
smoke sets it); the extra calls cost two Ray round trips per phase.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MEMORY_REPORT_ENV = "DARLING_MEMORY_REPORT"  # set by --smoke: the file the probe appends to
MIB = 1024**2
GIB = 1024**3


def _peak_gib(infos: list[dict[str, Any]]) -> float:
    """The largest peak over workers (get_gpu_info reports MiB)."""
    return max(float(info["peak_memory_allocated_mb"]) for info in infos) * MIB / GIB


@contextmanager
def probed(policy: Any, report: Path) -> Iterator[None]:
    """Wrap the Policy's phases for the block; the originals are put back on the way out."""
    import ray

    group = policy.worker_group
    trained = [0]
    working = [True]  # a probe that failed once stays off: the run goes on without it

    def on_workers(method: str) -> list[Any] | None:
        if not working[0]:
            return None
        try:
            return ray.get(group.run_all_workers_single_data(method))
        except Exception as err:  # the report is a report: it never stops the run
            working[0] = False
            print(f"memory probe off: {method} failed ({type(err).__name__}: {err})", flush=True)
            return None

    def measured(phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            on_workers("reset_peak_memory_stats")
            result = call(*args, **kwargs)
            infos = on_workers("get_gpu_info")
            step = trained[0] + 1  # log-probs of a step come before its training
            if phase == "training":
                trained[0] += 1
            if infos:
                with report.open("a") as out:
                    row = {"phase": phase, "step": step, "peak_gib": round(_peak_gib(infos), 3)}
                    out.write(json.dumps({**row, "workers": len(infos)}) + "\n")
            return result

        return wrapper

    phases = {
        "train": "training",
        "get_logprobs": "logprobs",
        "get_reference_policy_logprobs": "logprobs",
    }
    before = {name: policy.__dict__.get(name) for name in phases}
    report.parent.mkdir(parents=True, exist_ok=True)
    for name, phase in phases.items():
        setattr(policy, name, measured(phase, getattr(policy, name)))
    print(f"memory probe: per-phase peaks of the policy workers -> {report}", flush=True)
    try:
        yield
    finally:
        for name, previous in before.items():
            if previous is None:
                delattr(policy, name)
            else:
                setattr(policy, name, previous)
