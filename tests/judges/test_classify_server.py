"""The served judge against real `/classify` servers on 127.0.0.1 (darling_nemo.classify_server
processes holding a tiny checkpoint), including the fault cases: a server killed mid-call,
all servers down, a slow server past the timeout, malformed replies, over-long input. The
slow and malformed cases put a small misbehaving proxy in front of a real server. Also the
launcher (`darling-serve-classifiers`) starting real local servers, and `darling-score`
with the served judge."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml
from aiohttp import ClientSession, web
from helpers import REPO, wait_ready

from darling_nemo.config import apply_overrides
from darling_nemo.judges import make_judge
from darling_nemo.judges.served import ServedJudgeError, probe_served_judge
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import validate_darling

STARTUP_TIMEOUT_S = 180


pytestmark = pytest.mark.usefixtures("offline")


def start_server(model: str, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "darling_nemo.classify_server", "serve", model,
         "--port", "0", "--served-model-name", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_free_ports() -> int:
    """A port `base` such that base and base+1 can both be bound, drawn below Linux's
    ephemeral range (32768+): client sockets of other tests take ports from that range, and
    one did take base+1 between the check and the server's bind."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000)
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", base))
                second.bind(("127.0.0.1", base + 1))
        except OSError:
            continue
        return base
    raise RuntimeError("no two consecutive free ports in 20000-32000")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny"), "bert"))


@pytest.fixture(scope="module")
def servers(model_dir):
    """Three real servers: two that stay up and one to be killed. Started in parallel."""
    procs = [start_server(model_dir, f"similarity_gpu_{k}") for k in range(3)]
    logs: list[list[str]] = [[] for _ in procs]  # what each prints, read on by wait_ready
    try:
        urls = [wait_ready(p, log, STARTUP_TIMEOUT_S) for p, log in zip(procs, logs, strict=True)]
        yield {"procs": procs, "urls": urls, "logs": logs}
    finally:
        for p in procs:
            stop_server(p)


@pytest.fixture(scope="module")
def qwen3_append_pad(tmp_path_factory):
    """A Qwen3 classifier whose tokenizer ends every input with its pad id, and its server."""
    path = str(save_tiny_classifier(tmp_path_factory.mktemp("qwen3"), "qwen3", append_pad=True))
    proc = start_server(path, "math_clf")
    try:
        yield {"model": path, "url": wait_ready(proc, timeout_s=STARTUP_TIMEOUT_S)}
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def reference(model_dir):
    """The same checkpoint in-process: what every served answer must equal."""
    return make_judge(
        validate_darling({"judge": {"kind": "cross_encoder", "model": model_dir}}).judge
    )


def endpoint(servers, k):
    return {"url": servers["urls"][k], "model": f"similarity_gpu_{k}"}


def served(endpoints, **options):
    judge = {"kind": "served", "endpoints": endpoints, "backoff_s": 0.05, **options}
    return make_judge(validate_darling({"judge": judge}).judge)


def random_pairs(n, seed=0, words=10):
    rng = np.random.default_rng(seed)
    return [
        (" ".join(rng.choice(WORDS, words)), " ".join(rng.choice(WORDS, words))) for _ in range(n)
    ]


def post(url, body: bytes):
    req = urllib.request.Request(f"{url}/classify", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# ---------------------------------------------------------------------------------------------
# The protocol (vLLM 0.10 /classify)
# ---------------------------------------------------------------------------------------------


def test_reply_has_the_vllm_shape(servers):
    url = servers["urls"][0]
    text = "[CLS] the cat [SEP] a dog [SEP]"
    status, reply = post(
        url, json.dumps({"model": "similarity_gpu_0", "input": [text, "sun"]}).encode()
    )
    assert status == 200
    assert reply["id"].startswith("classify-") and reply["object"] == "list"
    assert reply["model"] == "similarity_gpu_0"
    assert [d["index"] for d in reply["data"]] == [0, 1]
    for item in reply["data"]:
        assert set(item) == {"index", "label", "probs", "num_classes"}
        assert item["num_classes"] == len(item["probs"]) == 2
        assert sum(item["probs"]) == pytest.approx(1.0, abs=1e-5)
        assert item["label"] == ["different", "similar"][int(np.argmax(item["probs"]))]
    # the tokenizer adds its own [CLS] .. [SEP], as vLLM does: 7 tokens + 2, then "sun" + 2
    assert reply["usage"]["prompt_tokens"] == 9 + 3
    assert reply["usage"]["completion_tokens"] == 0
    status, single = post(url, json.dumps({"input": text}).encode())  # a string, no model
    assert status == 200  # alone, not batched with "sun": equal up to float rounding
    assert single["data"][0]["probs"] == pytest.approx(reply["data"][0]["probs"], abs=1e-6)


def test_server_errors_have_the_vllm_shape(servers):
    url = servers["urls"][0]
    status, reply = post(url, json.dumps({"model": "nope", "input": ["a"]}).encode())
    assert status == 404 and reply["message"] == "The model `nope` does not exist."
    assert reply["object"] == "error" and reply["code"] == 404
    status, reply = post(url, json.dumps({"input": "a " * 200}).encode())
    assert status == 400 and "maximum context length is 128 tokens" in reply["message"]
    status, reply = post(url, json.dumps({"input": ""}).encode())
    assert status == 400 and "empty" in reply["message"]
    status, reply = post(url, b"{oops")
    assert status == 400
    with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "similarity_gpu_0"


# A body of each bad shape, and what the 400's message says. The first two are the issue's: a
# 20 MB input was tokenized in full before its length was checked (400 after 20 s; a small
# request sent meanwhile waited as long; RSS 512 -> 1758 MiB, kept), and 200,000 nested `[`
# gave HTTP 500 and a RecursionError traceback in the server's log.
def twenty_mb() -> bytes:  # made when its case runs, not at import
    return json.dumps({"input": "cat " * (5 * 2**20)}).encode()


HOSTILE_BODIES = {
    "20 MB input": (twenty_mb, "request body is 20971533 bytes; this server takes at most"),
    "20 MB input, chunked": (twenty_mb, "request body is over the limit"),
    "50 MB announced, not sent": (None, "request body is 50000000 bytes"),
    "200,000 nested [": (b"[" * 200_000, "nests too deeply"),
    "40,000 nested objects": (b'{"a": ' * 40_000, "nests too deeply"),
    "not UTF-8": (b'{"input": "\xff"}', "not UTF-8 text: byte 0xff at offset 11"),
    "not JSON": (b"{oops", "not valid JSON: Expecting property name"),
    "empty body": (b"", "not valid JSON"),
    "a list": (b"[1, 2]", "must be a JSON object"),
    "a number": (b"42", "must be a JSON object"),
    "no input": (b"{}", "`input` must be a string or a list of strings"),
    "input 42": (b'{"input": 42}', "`input` must be a string or a list of strings"),
    "input null in a list": (b'{"input": ["a", null]}', "`input` must be a string or a list"),
    "model a list": (b'{"model": [1], "input": "a"}', "`model` must be a string, got list"),
    "truncate true": (
        b'{"input": "a", "truncate_prompt_tokens": true}',
        "`truncate_prompt_tokens` must be a positive integer or -1, got True",
    ),
    "100,000 characters": (
        json.dumps({"input": ["a", "cat " * 25_000]}).encode(),
        "input[1] has 100000 characters; this server tokenizes at most 4096",
    ),
}


def post_raw(url: str, body: bytes | None, mode: str = "sized") -> tuple[int, dict, float]:
    """POST a body as a hostile client might: sized (Content-Length), chunked (no length), or
    announced (Content-Length 50,000,000 and nothing sent). The status, JSON and seconds."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    start = time.monotonic()
    try:
        if mode == "announced":
            conn.putrequest("POST", "/classify")
            conn.putheader("Content-Length", "50000000")
            conn.endheaders()
        elif mode == "chunked":
            chunks = (body[k : k + 2**16] for k in range(0, len(body), 2**16))
            conn.request("POST", "/classify", body=chunks, encode_chunked=True)
        else:
            conn.request("POST", "/classify", body=body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), time.monotonic() - start
    finally:
        conn.close()


@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
def test_a_hostile_body_gets_400_at_once_and_stalls_nothing(servers, case):
    body, message = HOSTILE_BODIES[case]
    body = body() if callable(body) else body
    url, log = servers["urls"][0], servers["logs"][0]
    mode = "announced" if "announced" in case else ("chunked" if "chunked" in case else "sized")
    server = psutil.Process(servers["procs"][0].pid)
    small = json.dumps({"input": "the cat"}).encode()
    assert post(url, small)[0] == 200
    rss_before, logged_before = server.memory_info().rss, len(log)
    hostile: dict = {}
    sender = threading.Thread(target=lambda: hostile.update(reply=post_raw(url, body, mode)))
    sender.start()
    time.sleep(0.3)  # the hostile request is in the server's hands (the old one tokenized it)
    start = time.monotonic()
    assert post(url, small)[0] == 200
    waited = time.monotonic() - start
    sender.join(timeout=60)
    status, reply, took = hostile["reply"]
    assert status == 400 and reply["object"] == "error" and message in reply["message"], reply
    # Generous bounds for a loaded 2-core machine; the small request takes ~0.1 s here, the
    # old server's took 20 s (as long as tokenizing the 20 MB input).
    assert waited < 5, f"a small request waited {waited:.1f}s behind the {case} request"
    assert took < 10, f"the {case} request took {took:.1f}s to be refused"
    grown = (server.memory_info().rss - rss_before) / 2**20
    assert grown < 200, f"the server kept {grown:.0f} MiB after the {case} request"
    logged = "".join(log[logged_before:])  # the traceback is logged before the reply
    assert "Traceback" not in logged, logged[-2000:]


def test_max_body_bytes_must_be_positive(model_dir, capsys):
    from darling_nemo.classify_server import main

    assert main(["serve", model_dir, "--max-body-bytes", "0"]) == 2
    assert "--max-body-bytes must be at least 1, got 0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Normal operation
# ---------------------------------------------------------------------------------------------


def test_served_equals_in_process_and_spreads_the_load(servers, reference):
    pairs = random_pairs(40)
    with served([endpoint(servers, 0), endpoint(servers, 1)], pairs_per_request=3) as judge:
        got = judge(pairs)
        np.testing.assert_allclose(got, reference(pairs), atol=1e-5)
        # 14 requests of <= 3 pairs, least-loaded first: both servers work
        assert judge.stats["requests"] == 14
        assert all(e.sent > 0 and e.failures == 0 for e in judge.endpoints)
        assert judge([]) == []


def test_in_process_equals_served_past_the_template_budget(servers, model_dir):
    # max_length 32 < the model's 128: word truncation keeps (32 - 3) // 2 = 14 words each,
    # so each input is 1 + 14 + 1 + 14 + 1 = 31 tokens + the tokenizer's [CLS] .. [SEP] = 33.
    # The server takes all 33; the in-process judge must too (not cut them at 32).
    pairs = random_pairs(6, seed=7, words=20)
    in_process = make_judge(
        validate_darling(
            {"judge": {"kind": "cross_encoder", "model": model_dir, "max_length": 32}}
        ).judge
    )
    texts = [in_process.formatter.text(a, b) for a, b in pairs]
    assert {len(ids) for ids in in_process.classifier.encode(texts)} == {33}
    with served([endpoint(servers, 0)], max_length=32) as judge:
        got = judge(pairs)
    np.testing.assert_allclose(in_process(pairs), got, atol=1e-5)
    assert in_process.cut_inputs == 0
    # what cutting at the 32-token budget gives instead (no final [SEP] of the template):
    cut_at_budget = in_process.classifier.probs(texts, 8, max_length=32)[:, -1]
    assert np.abs(cut_at_budget - got).min() > 1e-4


def test_decoder_classifier_served_equals_in_process(qwen3_append_pad):
    # The tokenizer appends its pad id to every input; both paths pool that last token, as
    # vLLM does (tests/judges/test_judges.py checks the value against an unpadded forward pass).
    pairs = random_pairs(10, seed=9)
    in_process = make_judge(
        validate_darling(
            {
                "judge": {
                    "kind": "cross_encoder",
                    "model": qwen3_append_pad["model"],
                    "template": "qwen3_math",
                    "batch_size": 4,
                }
            }
        ).judge
    )
    target = {"url": qwen3_append_pad["url"], "model": "math_clf"}
    with served([target], template="qwen3_math", pairs_per_request=3) as judge:
        np.testing.assert_allclose(judge(pairs), in_process(pairs), atol=1e-5)


def test_requests_are_sized_by_tokens_without_changing_results(servers, reference, model_dir):
    pairs = random_pairs(40, seed=11)  # 10 words each: one token per word for this tokenizer
    # per pair: 10 + 10 words + template [CLS] [SEP] [SEP] + the tokenizer's [CLS] .. [SEP] = 25
    status, reply = post(
        servers["urls"][0], json.dumps({"input": "[CLS] " + "a " * 20 + "[SEP] [SEP]"}).encode()
    )
    assert status == 200 and reply["usage"]["prompt_tokens"] == 25  # what the server counts
    two_servers = [endpoint(servers, 0), endpoint(servers, 1)]
    with served(two_servers, tokenizer=model_dir, tokens_per_request=60) as judge:
        got = judge(pairs)
        # 25 + 25 = 50 <= 60 < 75: two pairs per request, 40 pairs -> 20 requests
        assert (judge.stats["requests"], judge.stats["tokens"]) == (20, 40 * 25)
    np.testing.assert_allclose(got, reference(pairs), atol=1e-5)
    with served(two_servers, tokenizer=model_dir, tokens_per_request=10) as judge:
        # every pair over the budget goes alone: 40 requests; the same values up to float
        # rounding (the server batches whatever is in flight, as vLLM does: padding differs)
        np.testing.assert_allclose(judge(pairs), got, atol=1e-6)
        assert judge.stats["requests"] == 40


def test_concurrent_requests_are_batched_by_the_server(servers, reference):
    # the reference pattern: one pair per request, everything in flight at once
    pairs = random_pairs(60, seed=1)
    with served([endpoint(servers, 0)], pairs_per_request=1, max_concurrency=64) as judge:
        np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
        assert judge.stats["requests"] == 60


# ---------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------


def test_server_killed_mid_call(servers, reference):
    pairs = random_pairs(100, seed=2)
    victim = servers["procs"][2]
    with served(
        [endpoint(servers, 2), endpoint(servers, 1)], pairs_per_request=1, max_concurrency=2
    ) as judge:
        result = {}
        call = threading.Thread(target=lambda: result.update(probs=judge(pairs)))
        call.start()
        give_up = time.monotonic() + 120
        while judge.endpoints[0].in_flight == 0:  # a request is on the victim right now
            assert call.is_alive() and time.monotonic() < give_up
            time.sleep(0.001)
        victim.send_signal(signal.SIGKILL)
        call.join(timeout=300)
        np.testing.assert_allclose(result["probs"], reference(pairs), atol=1e-5)
        dead, alive = judge.endpoints
        assert dead.failures >= 1 and dead.resting_until > 0
        assert alive.failures == 0 and alive.sent > dead.sent


def dead_url():
    return f"http://127.0.0.1:{free_port()}"  # bound then released: nobody listens there


def test_all_servers_down_fails_naming_every_endpoint():
    urls = [dead_url(), dead_url()]
    with served(urls, max_attempts=3) as judge, pytest.raises(ServedJudgeError) as err:
        judge(random_pairs(5))
    message = str(err.value)
    for url in urls:
        assert f"{url}: resting" in message
    assert "Cannot connect" in message and "Last error" in message


def test_all_down_with_a_fallback_logs_every_use(model_dir, reference, caplog):
    pairs = random_pairs(6, seed=3)
    fallback = {"kind": "cross_encoder", "model": model_dir, "threshold": 0.5}
    with served([dead_url()], max_attempts=2, fallback=fallback) as judge:
        with caplog.at_level(logging.WARNING, logger="darling_nemo.judges.served"):
            first = judge(pairs)
            judge(pairs)
        # the fallback's own decisions as 1/0 (its threshold 0.5, not the primary's 0.32)
        assert first == [1.0 if p > 0.5 else 0.0 for p in reference(pairs)]
        warnings = [r for r in caplog.records if "fallback 'cross_encoder'" in r.getMessage()]
        assert len(warnings) == 2  # one per call
        assert judge.stats["fallback_pairs"] == 12
    with served([dead_url()], max_attempts=1, fallback={"kind": "lexical"}) as judge:
        assert judge(pairs) == [0.0] * 6  # lexical: undecided pairs are distinct


class Proxy:
    """A proxy in front of a real server that delays or corrupts its replies."""

    def __init__(
        self, upstream: str, mode: str, delay_s: float = 0.0, serve_info: bool = False
    ) -> None:
        self.upstream, self.mode, self.delay_s = upstream, mode, delay_s
        self.serve_info = serve_info  # also pass GET /health and /v1/models through
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(30)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(self.delay_s)
        async with (
            ClientSession() as session,
            session.post(
                f"{self.upstream}/classify", data=body, headers={"Content-Type": "application/json"}
            ) as resp,
        ):
            reply = await resp.json()
        if self.mode == "not_json":
            return web.Response(text="<html>502 Bad Gateway</html>", status=200)
        if self.mode == "missing_item":
            reply["data"] = reply["data"][:-1]
        if self.mode == "bad_probability":
            reply["data"][0]["probs"] = [0.5, 7.0]
        if self.mode == "no_data":
            reply = {"object": "list"}
        if self.mode == "server_error":
            return web.Response(text="Internal Server Error", status=500)
        return web.json_response(reply)

    async def pass_through(self, request: web.Request) -> web.Response:
        async with ClientSession() as session, session.get(self.upstream + request.path) as resp:
            return web.Response(body=await resp.read(), status=resp.status)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/classify", self.handle)
        if self.serve_info:
            app.router.add_get("/health", self.pass_through)
            app.router.add_get("/v1/models", self.pass_through)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.ready.set()
        self.loop.run_forever()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def test_slow_server_past_the_timeout_is_routed_around(servers, reference):
    # The healthy server must answer within the timeout on a loaded 2-core machine (2.5 s); the
    # slow proxy (10 s) never does.
    slow = Proxy(servers["urls"][0], "pass", delay_s=10.0)
    try:
        pairs = random_pairs(12, seed=4)
        with served(
            [{"url": slow.url, "model": "similarity_gpu_0"}, endpoint(servers, 1)],
            pairs_per_request=2,
            request_timeout_s=2.5,
        ) as judge:
            np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
            assert judge.endpoints[0].failures >= 1
            assert "no reply within 2.5s" in judge.endpoints[0].last_error
        with (
            served(
                [{"url": slow.url, "model": "similarity_gpu_0"}],
                request_timeout_s=0.3,
                max_attempts=2,
            ) as judge,
            pytest.raises(ServedJudgeError, match=r"no reply within 0\.3s"),
        ):
            judge(pairs)
        with (
            served(  # the overall deadline bounds the call whatever the retries
                [{"url": slow.url, "model": "similarity_gpu_0"}],
                request_timeout_s=30,
                deadline_s=1.0,
                max_attempts=10,
            ) as judge,
            pytest.raises(ServedJudgeError, match=r"no reply within 1\.0s|deadline"),
        ):
            judge(pairs)
    finally:
        slow.close()


def test_a_wait_cut_by_the_deadline_does_not_rest_the_endpoint(servers, reference):
    slow = Proxy(servers["urls"][0], "pass", delay_s=8.0)
    try:
        pairs = random_pairs(4, seed=6)
        slow_endpoint = {"url": slow.url, "model": "similarity_gpu_0"}
        with served(
            [slow_endpoint, endpoint(servers, 1)],
            request_timeout_s=30,  # the deadline (1 s) cuts every wait, not this timeout
            deadline_s=1.0,
            endpoint_cooldown_s=600,
        ) as judge:
            with pytest.raises(ServedJudgeError, match=r"deadline of 1s passed while waiting"):
                judge(pairs)  # one request of 4 pairs: sent to the slow endpoint first
            assert judge.stats["failed_requests"] == 1
            slow_state = judge.endpoints[0]
            assert (slow_state.failures, slow_state.last_error) == (0, None)
            assert slow_state.resting_until == 0.0  # still in rotation, no 600 s rest
            assert "similarity_gpu_0): up, 0 failed" in slow_state.describe(time.monotonic())
        # Contrast: a timeout of its own (4 s, well within the deadline) does rest it. The
        # 8 s proxy always misses it; the healthy server must answer within it on a loaded CPU.
        with served(
            [slow_endpoint, endpoint(servers, 1)],
            request_timeout_s=4.0,
            deadline_s=30,
            endpoint_cooldown_s=600,
        ) as judge:
            np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
            assert judge.endpoints[0].failures == 1
            assert judge.endpoints[0].resting_until > 0.0
    finally:
        slow.close()


def test_with_a_fallback_resting_endpoints_hand_requests_to_it_at_once(
    servers, model_dir, reference
):
    black_hole = Proxy(servers["urls"][0], "pass", delay_s=120.0)  # takes requests, never answers
    try:
        pairs = random_pairs(8, seed=8)
        fallback = {"kind": "cross_encoder", "model": model_dir, "threshold": 0.5}
        with served(
            [{"url": black_hole.url, "model": "similarity_gpu_0"}],
            pairs_per_request=1,
            max_concurrency=1,
            request_timeout_s=0.3,
            max_attempts=3,
            endpoint_cooldown_s=600,
            fallback=fallback,
        ) as judge:
            first = judge(pairs)
            # 8 requests, one at a time: the first times out and rests the only endpoint; the
            # other 7 and the first one's retries then go to the fallback without a post.
            # Waiting on the resting endpoint instead posts 8 x 3 attempts = 24 times.
            assert judge.stats["requests"] == 1
            assert judge.stats["fallback_pairs"] == 8
            assert first == [1.0 if p > 0.5 else 0.0 for p in reference(pairs)]
            judge(pairs)  # a later call while the endpoint rests: no post at all
            assert judge.stats["requests"] == 1
            assert judge.stats["fallback_pairs"] == 16
            assert "no reply within 0.3s" in judge.endpoints[0].last_error
    finally:
        black_hole.close()


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("not_json", "malformed reply"),
        ("missing_item", r"expected 2 results in `data`, got 1"),
        ("bad_probability", "not a probability"),
        ("no_data", "malformed reply"),
        ("server_error", "HTTP 500"),
    ],
)
def test_malformed_replies(servers, reference, mode, message):
    broken = Proxy(servers["urls"][0], mode)
    try:
        pairs = random_pairs(8, seed=5)
        broken_endpoint = {"url": broken.url, "model": "similarity_gpu_0"}
        with (
            served([broken_endpoint], pairs_per_request=2, max_attempts=2) as judge,
            pytest.raises(ServedJudgeError, match=message),
        ):
            judge(pairs)
        with served([broken_endpoint, endpoint(servers, 1)], pairs_per_request=2) as judge:
            np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
            assert judge.endpoints[0].failures >= 1
    finally:
        broken.close()


def test_over_long_input_fails_at_once_with_the_fix(servers, model_dir):
    long_pair = [(" ".join(["cat"] * 100), " ".join(["dog"] * 100))]
    # without a tokenizer the served judge keeps (2048 - 3) // 2 = 1022 words of each, so
    # all 100 + 100: 3 template + 200 + 2 tokenizer tokens = 205 > 128 tokens
    with served([endpoint(servers, 0)]) as judge:
        with pytest.raises(ServedJudgeError, match=r"maximum context length.*truncation=tokens"):
            judge(long_pair)
        assert judge.endpoints[0].failures == 0  # the request's fault, not the server's
    tokens = {"truncation": "tokens", "tokenizer": model_dir}
    with served([endpoint(servers, 0)], **tokens) as judge:
        in_process = make_judge(
            validate_darling(
                {"judge": {"kind": "cross_encoder", "model": model_dir, "truncation": "tokens"}}
            ).judge
        )
        np.testing.assert_allclose(judge(long_pair), in_process(long_pair), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Start-up check
# ---------------------------------------------------------------------------------------------


def served_config(endpoints):
    return validate_darling({"judge": {"kind": "served", "endpoints": endpoints}}).judge


def test_probe_rejects_a_non_positive_timeout():
    with pytest.raises(ValueError, match="timeout_s must be > 0, got 0"):
        probe_served_judge(served_config(["http://127.0.0.1:1"]), timeout_s=0)


def test_probe_passes_good_endpoints(servers):
    config = served_config([endpoint(servers, 0), endpoint(servers, 1), servers["urls"][1]])
    # no model named: any is fine; a generous timeout, which a passing probe never waits out
    assert probe_served_judge(config, timeout_s=60) is None


def test_probe_names_every_bad_endpoint_in_one_error(servers):
    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    no_health = Proxy(servers["urls"][0], "pass")  # answers POST /classify only
    refused = dead_url()
    try:
        config = served_config(
            [
                endpoint(servers, 0),  # good
                {"url": refused, "model": "similarity_gpu_0"},
                {"url": servers["urls"][1], "model": "similarity_gpu_9"},
                {"url": silent_url, "model": "similarity_gpu_0"},
                {"url": no_health.url, "model": "similarity_gpu_0"},
            ]
        )
        with pytest.raises(ServedJudgeError) as err:
            probe_served_judge(config, timeout_s=3.0)
    finally:
        silent.close()
        no_health.close()
    lines = str(err.value).splitlines()
    assert lines[0].startswith("served judge: 4 of 5 endpoint(s) failed the start-up check")
    assert lines[1:] == [
        f"  darling.judge.endpoints[1] {refused}: connection refused (nothing listens on that "
        "port)",
        f"  darling.judge.endpoints[2] {servers['urls'][1]}: model 'similarity_gpu_9' is not "
        "served there; it serves 'similarity_gpu_1'",
        f"  darling.judge.endpoints[3] {silent_url}: GET /health: no reply within 3s",
        f"  darling.judge.endpoints[4] {no_health.url}: GET /health: HTTP 404 (not a vLLM or "
        "classify_server?)",
    ]


def test_probe_checks_the_endpoints_at_once():
    """Two endpoints that accept and never answer: the second is connected to while the
    first still waits for its reply, i.e. the probe does not wait out one timeout per
    endpoint. Checked by the order of events, not by wall time (a loaded machine can stretch
    any duration)."""
    listeners = [socket.socket() for _ in range(2)]
    for listener in listeners:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
    seen: dict[str, object] = {}

    def watch() -> None:
        try:
            first, _ = listeners[0].accept()
            request = b""
            while b"\r\n\r\n" not in request:  # the whole GET /health has arrived
                chunk = first.recv(4096)
                if not chunk:
                    break
                request += chunk
            second, _ = listeners[1].accept()
            first.setblocking(False)
            try:  # b"": the client gave up on the first (timed out) before the second
                seen["first_at_second"] = first.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                seen["first_at_second"] = "still waiting"
            seen["request"] = request.split(b"\r\n")[0]
            second.close()
            first.close()
        except OSError as err:  # a listener closed under accept(): the probe never came
            seen["error"] = err

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    urls = [f"http://127.0.0.1:{listener.getsockname()[1]}" for listener in listeners]
    try:
        with pytest.raises(ServedJudgeError, match="2 of 2 endpoint"):
            probe_served_judge(served_config(urls), timeout_s=3.0)
        watcher.join(timeout=60)
    finally:
        for listener in listeners:
            listener.close()
    assert seen.get("request") == b"GET /health HTTP/1.1", seen
    assert seen["first_at_second"] == "still waiting", seen


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("server_error", r"POST /classify of one pair: HTTP 500"),
        ("bad_probability", r"POST /classify: malformed reply .*not a probability"),
    ],
)
def test_probe_checks_that_classify_answers(servers, mode, message):
    broken = Proxy(servers["urls"][0], mode, serve_info=True)
    try:
        config = served_config([{"url": broken.url, "model": "similarity_gpu_0"}])
        with pytest.raises(ServedJudgeError, match=message):
            probe_served_judge(config, timeout_s=60)  # the broken answers come at once
    finally:
        broken.close()


# ---------------------------------------------------------------------------------------------
# darling-score and the launcher
# ---------------------------------------------------------------------------------------------


def test_darling_score_with_the_served_judge(servers, tmp_path):
    from darling_nemo.score import main

    groups = tmp_path / "groups.jsonl"
    responses = [" ".join(WORDS[k : k + 8]) for k in range(0, 40, 8)]
    groups.write_text(json.dumps({"responses": responses, "quality": [1] * 5}) + "\n")
    out = tmp_path / "out.jsonl"
    endpoints = "[" + ", ".join(f"{{url: {u}}}" for u in servers["urls"][:2]) + "]"
    args = [
        str(groups),
        "-o",
        str(out),
        "--judge",
        "served",
        "--judge-set",
        f"endpoints={endpoints}",
    ]
    assert main(args) == 0
    row = json.loads(out.read_text())
    assert row["pairs_judged"] >= 4 and len(row["class_ids"]) == 5


def test_launcher_dry_run_prints_commands_and_endpoints(capsys):
    from darling_nemo.serve_classifiers import main

    assert main(["model=/ckpt/clf", "gpus=[0,1]", "advertise_host=node7", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    # this machine's address (its hostname's), not every interface; the token's middleware
    host = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0]
    assert out[0] == (
        "CUDA_VISIBLE_DEVICES=0 vllm serve /ckpt/clf --task classify --dtype auto "
        f"--host {host} --port 8000 --served-model-name similarity_gpu_0 "
        "--middleware darling_nemo.judges.auth.BearerTokenAuth"
    )
    assert "0.0.0.0" not in "\n".join(out)
    assert out[1].startswith("CUDA_VISIBLE_DEVICES=1 ") and "--port 8001" in out[1]
    override = out[-1].removeprefix("# override: darling.")
    section = validate_darling({"judge": {"kind": "served"}}).model_dump(mode="json")
    cfg = validate_darling(apply_overrides(section, [override]))
    assert [(e.url, e.model) for e in cfg.judge.endpoints] == [
        ("http://node7:8000", "similarity_gpu_0"),
        ("http://node7:8001", "similarity_gpu_1"),
    ]
    block = yaml.safe_load("\n".join(out[2:-1]))
    assert block["endpoints"][1] == {"url": "http://node7:8001", "model": "similarity_gpu_1"}


def test_launcher_reads_the_shipped_config(capsys):
    from darling_nemo.serve_classifiers import main

    repo = REPO
    config = str(repo / "conf/classifier/serve_8gpu.yaml")
    assert main(["--config", config, "advertise_host=n1", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if " vllm serve " in line]) == 8
    assert out[7].startswith("CUDA_VISIBLE_DEVICES=7 vllm serve dogtooth/similarity-classifier")
    assert "--port 8007 --served-model-name similarity_gpu_7" in out[7]
    assert main(["--config", config, "gpu=[0]", "--dry-run"]) == 2  # unknown key
    assert "unknown key 'gpu'" in capsys.readouterr().err


def test_launcher_runs_local_servers_and_stops_them(model_dir, reference, tmp_path, monkeypatch):
    base = two_free_ports()
    monkeypatch.setenv("DARLING_JUDGE_TOKEN", "the-launchers-token-given-by-its-job")
    endpoints_file = tmp_path / "endpoints.yaml"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "darling_nemo.serve_classifiers", f"model={model_dir}",
         "gpus=[0,1]", f"base_port={base}", "host=127.0.0.1", "advertise_host=127.0.0.1",
         f"executable={sys.executable} -m darling_nemo.classify_server",
         f"endpoints_file={endpoints_file}", f"log_dir={tmp_path / 'logs'}"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not endpoints_file.exists():
            assert launcher.poll() is None, "launcher exited early"
            assert time.monotonic() < deadline, "servers not ready"
            time.sleep(0.5)
        endpoints = yaml.safe_load(endpoints_file.read_text())["endpoints"]
        assert [e["model"] for e in endpoints] == ["similarity_gpu_0", "similarity_gpu_1"]
        pairs = random_pairs(10, seed=6)
        with served(endpoints, pairs_per_request=2) as judge:
            np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)
        logs = sorted(p.name for p in Path(tmp_path / "logs").iterdir())
        assert logs == ["classifier_0.log", "classifier_1.log"]
    finally:
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 0
    for k in range(2):  # the servers went with it
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", base + k)) != 0
