"""Prefix caching end to end (issue 31): real `darling_nemo.classify_server` processes with a
tiny causal classifier, launched with and without vLLM 0.10.0's LAST pooling flag, and the
served judge sending a group's pairs so that those sharing a first response hit the cache."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from helpers import wait_ready

from darling_nemo.judges import make_judge
from darling_nemo.judges.served import by_first_response
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import validate_darling

LAST = ["--override-pooler-config", '{"pooling_type":"LAST"}']

pytestmark = pytest.mark.usefixtures("offline")


def start(model: str, name: str, *extra: str) -> tuple[subprocess.Popen, str, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "darling_nemo.classify_server", "serve", model, "--port", "0",
         "--served-model-name", name, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    seen: list[str] = []
    return proc, wait_ready(proc, seen), seen


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    line = next(x for x in text.splitlines() if x.startswith(f"vllm:{name}_total"))
    return float(line.split()[-1])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    return str(save_tiny_classifier(path, "qwen3", max_positions=512, append_pad=True))


@pytest.fixture(scope="module")
def servers(model):
    """Two caching servers and one launched without the flag (vLLM 0.10.0: no caching)."""
    started = [start(model, "m0", *LAST), start(model, "m1", *LAST), start(model, "m2")]
    try:
        yield started
    finally:
        for proc, _, _ in started:
            stop(proc)


def group_pairs(seed: int, n: int = 8) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    responses = [" ".join(rng.choice(WORDS, int(rng.integers(30, 60)))) for _ in range(n)]
    return [(responses[i], responses[j]) for i in range(n) for j in range(i + 1, n)]


def judge(endpoints, **options):
    cfg = {"kind": "served", "endpoints": endpoints, "template": "qwen3_math", "backoff_s": 0.05}
    return make_judge(validate_darling({"judge": {**cfg, **options}}).judge)


def reference(model):
    cfg = {"kind": "cross_encoder", "model": model, "template": "qwen3_math", "batch_size": 8}
    return make_judge(validate_darling({"judge": cfg}).judge)


def test_servers_say_whether_they_cache(servers):
    logs = ["".join(seen) for _, _, seen in servers]
    assert "prefix caching on (causal classifier, LAST pooling)" in logs[0]
    assert "prefix caching off (vLLM 0.10.0 caches only with pooling_type LAST)" in logs[2]


def test_pairs_sharing_a_first_response_hit_one_servers_cache(servers, model):
    pairs = group_pairs(0) + group_pairs(1)
    urls = [servers[0][1], servers[1][1]]
    before = sum(metric(u, "prefix_cache_hits") for u in urls)
    with judge([{"url": u} for u in urls]) as served:
        assert served.affinity
        got = served(pairs)
        # 2 groups x 7 first responses: each first pair alone, then the rest in one request
        assert served.stats["requests"] == 2 * 7 * 2 - 2
        cached = served.stats["cached_tokens"]
    np.testing.assert_allclose(got, reference(model)(pairs), atol=1e-5)
    # every pair after a first response's first reuses at least one 16-token block of
    # `CLS a SEP` (a has >= 30 words); the servers' counters say the same
    assert cached >= 2 * 21 * 16
    assert sum(metric(u, "prefix_cache_hits") for u in urls) - before == cached


def test_without_affinity_or_without_the_flag_nothing_is_reused(servers, model):
    pairs = group_pairs(2)
    with judge([{"url": servers[2][1]}]) as served:  # launched without LAST pooling
        served(pairs)
        assert served.stats["cached_tokens"] == 0
    assert metric(servers[2][1], "prefix_cache_hits") == 0
    with judge([{"url": servers[0][1]}], prefix_affinity=False, pairs_per_request=1) as served:
        got = served(pairs)  # one pair per request, in order: hits are luck, results equal
        assert served.stats["requests"] == len(pairs)
    np.testing.assert_allclose(got, reference(model)(pairs), atol=1e-5)


def test_a_dead_servers_pairs_go_elsewhere(servers, model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    pairs = group_pairs(3)
    with judge([{"url": dead}, {"url": servers[1][1]}], max_attempts=3) as served:
        got = served(pairs)
        assert served.stats["failed_requests"] >= 1
        assert served.stats["cached_tokens"] > 0
    np.testing.assert_allclose(got, reference(model)(pairs), atol=1e-5)


def test_pairs_are_grouped_by_first_response_in_call_order():
    firsts = ["a", "a", "b", "a", "c", "b"]
    assert by_first_response(firsts) == [[0, 1, 3], [2, 5], [4]]
