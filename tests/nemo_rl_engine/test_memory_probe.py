"""--smoke's memory probe (darling_nemo/nemo_rl/memory_probe.py) on a real local Ray.

NeMo-RL is not importable in the CPU suite, so the policy here has NeMo-RL v0.4.0's shape
where the probe touches it: `worker_group.run_all_workers_single_data(method)` returning one
Ray future per worker, and workers with `reset_peak_memory_stats()` and `get_gpu_info()`
(whose `peak_memory_allocated_mb` is torch.cuda.max_memory_allocated in NeMo-RL; here each
actor's peak is what the test made it allocate since its last reset).
"""

from __future__ import annotations

import json

import pytest
from helpers import start_local_ray

ray = pytest.importorskip("ray")

from darling_nemo.nemo_rl.memory_probe import probed  # noqa: E402 (after the import-or-skip)


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, broken: bool = False) -> None:
        self.peak, self.broken = 0.0, broken

    def use(self, mib: float) -> None:
        self.peak = max(self.peak, mib)

    def reset_peak_memory_stats(self) -> None:
        self.peak = 0.0

    def get_gpu_info(self) -> dict:
        if self.broken:
            raise RuntimeError("no GPU here")
        return {"peak_memory_allocated_mb": self.peak}


class WorkerGroup:
    def __init__(self, workers) -> None:
        self.workers = workers

    def run_all_workers_single_data(self, method: str):
        return [getattr(w, method).remote() for w in self.workers]


class Policy:
    """Each phase makes worker k use `mib[k]` MiB."""

    def __init__(self, workers) -> None:
        self.worker_group = WorkerGroup(workers)

    def _use(self, mib: list[float]) -> None:
        ray.get([w.use.remote(m) for w, m in zip(self.worker_group.workers, mib, strict=True)])

    def get_logprobs(self, mib):
        self._use(mib)
        return "logprobs"

    def get_reference_policy_logprobs(self, mib, micro_batch_size=None):
        self._use(mib)
        return "reference"

    def train(self, mib):
        self._use(mib)
        return "trained"


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    if ray.is_initialized():
        yield
        return
    start_local_ray(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    yield
    ray.shutdown()


@pytest.mark.slow  # a local Ray: 10-50 s on 2 shared cores
def test_each_phase_reports_its_own_peak_over_the_workers(local_ray, tmp_path):
    policy = Policy([Worker.remote(), Worker.remote()])
    report = tmp_path / "memory.jsonl"
    with probed(policy, report):
        # step 1: log-probs peak max(1024, 512) MiB = 1 GiB; training max(2048, 3072) = 3 GiB
        assert policy.get_logprobs([1024, 512]) == "logprobs"
        assert policy.train([2048, 3072]) == "trained"
        # step 2: the peak was reset before the phase, so 3 GiB of step 1 does not carry over
        assert policy.get_reference_policy_logprobs([256, 512]) == "reference"
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert rows == [
        {"phase": "logprobs", "step": 1, "peak_gib": 1.0, "workers": 2},
        {"phase": "training", "step": 1, "peak_gib": 3.0, "workers": 2},
        {"phase": "logprobs", "step": 2, "peak_gib": 0.5, "workers": 2},
    ]
    assert "train" not in policy.__dict__  # the class's methods are back


def test_a_probe_that_fails_turns_itself_off_and_the_run_goes_on(local_ray, tmp_path, capsys):
    policy = Policy([Worker.remote(), Worker.remote(broken=True)])
    report = tmp_path / "memory.jsonl"
    with probed(policy, report):
        assert policy.train([1, 2]) == "trained"
        assert policy.train([1, 2]) == "trained"
    assert not report.exists()
    out = capsys.readouterr().out
    assert out.count("memory probe off: get_gpu_info failed (RayTaskError") == 1
