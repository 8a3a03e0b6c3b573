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


def record_posts(served, monkeypatch) -> list[tuple[str, list[str]]]:
    """Each request the served judge posts, as (endpoint url, input texts), in order."""
    posts: list[tuple[str, list[str]]] = []
    post = served._post

    async def recording(endpoint, texts, timeout):
        posts.append((endpoint.url, list(texts)))
        return await post(endpoint, texts, timeout)

    monkeypatch.setattr(served, "_post", recording)
    return posts


def first_responses_by_request(served, pairs, posts) -> dict[str, list[tuple[str, int]]]:
    """Each first response's requests, in order, as (endpoint url, pairs in the request)."""
    texts, _ = served.formatter.texts_and_tokens(pairs)
    first_of = dict(zip(texts, (a for a, _ in pairs), strict=True))
    requests: dict[str, list[tuple[str, int]]] = {}
    for url, sent in posts:
        (first,) = {first_of[text] for text in sent}  # a request carries one first response
        requests.setdefault(first, []).append((url, len(sent)))
    return requests


def test_pairs_sharing_a_first_response_hit_one_servers_cache(servers, model, monkeypatch):
    pairs = group_pairs(0) + group_pairs(1)
    urls = [servers[0][1], servers[1][1]]
    before = sum(metric(u, "prefix_cache_hits") for u in urls)
    with judge([{"url": u} for u in urls]) as served:
        assert served.affinity
        posts = record_posts(served, monkeypatch)
        got = served(pairs)
        # 2 groups x 7 first responses: each first pair alone, then the rest in one request
        assert served.stats["requests"] == 2 * 7 * 2 - 2
        cached = served.stats["cached_tokens"]
        # each first response's pairs go where its first pair was answered (its cached
        # blocks are there); the first pairs, sent at once, spread over both servers
        requests = first_responses_by_request(served, pairs, posts)
        assert len(requests) == 14
        for (lead_url, lead_size), *rest in requests.values():
            assert lead_size == 1 and all(url == lead_url for url, _ in rest)
        assert {lead_url for (lead_url, _), *_ in requests.values()} == set(urls)
    np.testing.assert_allclose(got, reference(model)(pairs), atol=1e-5)
    # every pair after a first response's first reuses at least one 16-token block of
    # `CLS a SEP` (a has >= 30 words); the servers' counters say the same
    assert cached >= 2 * 21 * 16
    assert sum(metric(u, "prefix_cache_hits") for u in urls) - before == cached
    with judge([{"url": u} for u in urls]) as served:
        # One first response, both servers idle: its first pair goes to the first endpoint
        # (a tie: none in flight, none sent), and its other pairs follow it there although
        # the second endpoint, with fewer requests sent, is the least loaded then.
        posts = record_posts(served, monkeypatch)
        served(group_pairs(4)[:7])
        assert [(url, len(sent)) for url, sent in posts] == [(urls[0], 1), (urls[0], 6)]
        assert [e.sent for e in served.endpoints] == [2, 0]


def test_each_request_goes_to_the_least_loaded_endpoint(servers):
    pairs = group_pairs(5)  # 28 pairs, in order: 10 requests of <= 3 pairs
    urls = [servers[0][1], servers[1][1]]
    options = {"prefix_affinity": False, "pairs_per_request": 3, "max_concurrency": 16}
    with judge([{"url": u} for u in urls], **options) as served:
        # Room for all 10 in flight: each goes to the endpoint with the fewest in flight (a
        # tie to the one that sent fewer, then to the first), so they alternate, 5 each.
        served(pairs)
        assert [e.sent for e in served.endpoints] == [5, 5]
        # Both idle again: one request at a time goes where fewer were sent, the first on a tie
        served(pairs[:1])
        assert [e.sent for e in served.endpoints] == [6, 5]
        served(pairs[:1])
        assert [e.sent for e in served.endpoints] == [6, 6]


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
