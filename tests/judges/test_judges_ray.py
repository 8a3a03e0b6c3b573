"""The Ray actor pool judge on a real local Ray cluster (CPU actors, a tiny checkpoint)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import start_local_ray

from darling_nemo.judges import make_judge
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import validate_darling

# Under `uv run` Ray would start workers through `uv run` in a copy of the working directory
# (without this package); the local test cluster's workers use this interpreter instead.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny"), "bert"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        yield
        return
    from ray._private import ray_constants  # in case ray was imported before this module

    saved = getattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", None)
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    start_local_ray(
        num_cpus=4,  # logical: two actors of one CPU each plus room for tasks
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}},
    )
    yield
    ray.shutdown()
    if saved is not None:
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = saved


def pool_cfg(model_dir, **options):
    judge = {
        "kind": "ray_pool",
        "classifier": {"model": model_dir},
        "num_gpus_per_actor": 0,
        "num_cpus_per_actor": 1,
        **options,
    }
    return validate_darling({"judge": judge}).judge


def random_pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(" ".join(rng.choice(WORDS, 9)), " ".join(rng.choice(WORDS, 9))) for _ in range(n)]


def test_pool_equals_in_process_and_survives_a_dead_actor(cluster, model_dir):
    reference = make_judge(
        validate_darling({"judge": {"kind": "cross_encoder", "model": model_dir}}).judge
    )
    judge = make_judge(pool_cfg(model_dir, num_actors=2, pairs_per_task=3))
    try:
        assert judge.devices == ["cpu", "cpu"]
        pairs = random_pairs(20)
        np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
        assert judge.stats["tasks"] == 7  # ceil(20 / 3)
        assert judge([]) == []
        ray.kill(judge.actors[0], no_restart=False)  # Ray restarts it; its tasks are resent
        more = random_pairs(30, seed=1)
        np.testing.assert_allclose(judge(more), reference(more), atol=1e-5)
    finally:
        judge.close()


def test_pool_reports_a_classifier_that_cannot_load(cluster, tmp_path):
    from darling_nemo.judges.ray_pool import RayPoolJudgeError

    with pytest.raises(RayPoolJudgeError, match="failed to start"):
        make_judge(pool_cfg(str(tmp_path / "missing"), max_attempts=1))


def test_darling_score_with_the_ray_pool(cluster, model_dir, tmp_path):
    from darling_nemo.score import main

    groups = tmp_path / "groups.jsonl"
    responses = [" ".join(WORDS[k : k + 8]) for k in range(0, 48, 8)]
    groups.write_text(json.dumps({"responses": responses, "quality": [1] * 6}) + "\n")
    out = tmp_path / "out.jsonl"
    args = [
        str(groups), "-o", str(out), "--judge", "ray_pool",
        "--judge-set", f"classifier.model={model_dir}",
        "--judge-set", "num_gpus_per_actor=0",
        "--judge-set", "num_cpus_per_actor=1",
    ]  # fmt: skip
    assert main(args) == 0
    row = json.loads(out.read_text())
    assert row["pairs_judged"] >= 5 and len(row["class_ids"]) == 6
