"""Served judge: a client of `vllm serve --task classify` (or `darling_nemo.classify_server`).

Protocol (vLLM 0.10 `POST /classify`): request `{"model": name, "input": [text, ...]}`,
reply `{"data": [{"index": i, "label": ..., "probs": [...], "num_classes": k}, ...],
"usage": {...}}`; P(similar) = `probs[-1]`. One judge call (a wave of pairs from every
group of a step) is cut, in order, into requests of at most `tokens_per_request` input
tokens and `pairs_per_request` pairs (`pack_requests`), so a request of long math pairs
takes no longer on a busy server than one of short chat pairs. Each request goes to the
least-loaded healthy endpoint (fewest requests in flight, at most `max_concurrency` each),
so a slow or dead server never holds a fixed share of the work. Request boundaries never
change a decision: a pair gets the same P(similar) whichever request carries it, up to float
rounding (servers batch whatever is in flight, so padding differs from run to run anyway).

Prefix affinity (on for a causal classifier's template, `prefix_affinity`): a pair's input
is `CLS a SEP b SEP`, and a causal classifier served with prefix caching (vLLM's automatic
prefix caching, LAST pooling) reuses the key/value blocks of `CLS a SEP` for every pair that
starts with the same `a`, but only on the server that computed them, and only once they are
computed (vLLM caches a block when its prefill is done; pairs prefilled in the same step all
miss). So the pairs sharing a first response go together: the first of them is sent alone,
to the least-loaded endpoint, and the others, once its reply is back (its blocks cached),
to that same endpoint, packed as usual. If that endpoint fails they go to any other (a
cache miss, never a wrong answer). Pair order within a request is unchanged (a before b).

Start-up: `probe_served_judge` checks every endpoint in seconds (reachable, healthy, serving
the configured model, answering /classify) and names each bad one, so a typo in a URL or a
model name fails before a training job's long set-up rather than at its first step.

Every request carries this job's token (judges/auth.py), sent to an endpoint only once it
proved it holds the token (`auth.prove_server`); no proof, or a 401 (a squatter on the port,
a server of another job), fails the probe, or the call, at once with one line saying so.

Failures: a connection error, timeout, 5xx/404 status or malformed reply takes the endpoint
out of rotation for `endpoint_cooldown_s` and the request is retried elsewhere after an
exponential backoff (a wait that the call's deadline cut below `request_timeout_s` is not
the endpoint's fault: it stays in rotation). When every endpoint is resting, the one whose
rest ends first is tried (so one server that blinked is not locked out), unless a `fallback`
is configured: then the request fails at once and the fallback judges its pairs, instead of
waiting up to `max_attempts` x `request_timeout_s` on servers that just failed. A request
that failed `max_attempts` times, or passes `deadline_s`, fails the call with a
`ServedJudgeError` naming every endpoint and the last error; with a `fallback` judge
configured, its pairs are judged by the fallback instead, and that is logged every time.
A 400 reply (e.g. an input longer than the model) is a configuration problem that no retry
fixes: it fails at once. Never a silent zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import socket
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiohttp

from darling_nemo.core import PairJudge
from darling_nemo.judges import JudgeError, auth
from darling_nemo.judges.served_wire import (
    BadRequest,
    EndpointFailure,
    NoReply,
    Refused,
    by_first_response,
    cached_tokens,
    classify_payload,
    pack_requests,
    parse_reply,
    prove_endpoint,
)
from darling_nemo.judges.templates import PairFormatter
from darling_nemo.plan import resolve_architecture
from darling_nemo.schema import PAIR_TEMPLATES, ServedJudgeConfig

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 8.0


class ServedJudgeError(JudgeError):
    """The classifier servers could not judge a call's pairs (and no fallback is set)."""


@dataclass
class _Endpoint:
    url: str
    model: str | None
    in_flight: int = 0
    sent: int = 0
    failures: int = 0
    resting_until: float = 0.0  # event-loop time; out of rotation until then
    last_error: str | None = None

    def describe(self, now: float) -> str:
        name = f"{self.url} (model {self.model})" if self.model else self.url
        state = "resting" if self.resting_until > now else "up"
        last = f"; last error: {self.last_error}" if self.last_error else ""
        return f"{name}: {state}, {self.failures} failed request(s){last}"


class ServedJudge:
    """PairJudge over classifier servers; owns one background event loop (so it works when
    called from inside another event loop, and keeps its connections between calls)."""

    def __init__(
        self,
        cfg: ServedJudgeConfig,
        fallback: PairJudge | None = None,
    ) -> None:
        self.cfg = cfg
        self.fallback = fallback
        tokenizer = None
        if cfg.tokenizer is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
        self.formatter = PairFormatter(cfg.template, cfg.max_length, cfg.truncation, tokenizer)
        self.endpoints = [_Endpoint(e.url, e.model) for e in cfg.endpoints]
        self.token = auth.job_token()
        self.headers = auth.bearer_header(self.token)
        self.affinity = (
            cfg.prefix_affinity
            if cfg.prefix_affinity is not None
            else not resolve_architecture(PAIR_TEMPLATES[cfg.template].reference_model, "").encoder
        )
        self.stats = {
            "requests": 0,
            "failed_requests": 0,
            "pairs": 0,
            "tokens": 0,  # input tokens sent, as counted (or estimated) for packing
            "fallback_pairs": 0,
            "cached_tokens": 0,  # prompt tokens the servers reused (their usage replies)
        }
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="served-judge", daemon=True
        )
        self._thread.start()
        self._net: dict[str, Any] = {}  # "session", "slot_freed": made on the loop thread
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._thread, self._net)

    # -- public ------------------------------------------------------------------------------

    @property
    def prefix_words(self) -> int | None:
        """The formatter's (judge_stream.prefix_words); None with a fallback judge, which
        would be handed what it is given, not the first words only."""
        return self.formatter.prefix_words if self.fallback is None else None

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        texts, tokens = self.formatter.texts_and_tokens(pairs)
        firsts = [a for a, _ in pairs] if self.affinity else None
        call = self._classify(texts, tokens, firsts)
        probs, failed, last_error = asyncio.run_coroutine_threadsafe(call, self._loop).result()
        self.stats["pairs"] += len(pairs)
        self.stats["tokens"] += sum(tokens)
        if not failed:
            return probs
        lost = sum(len(indices) for indices in failed)
        summary = self._failure_summary(len(failed), last_error)
        if self.cfg.fallback is None:
            raise ServedJudgeError(summary)
        log.warning(
            "%s; judging %d of %d pairs with the fallback %r judge",
            summary,
            lost,
            len(pairs),
            self.cfg.fallback.kind,
        )
        self.stats["fallback_pairs"] += lost
        for indices in failed:
            decisions = self._fallback_decisions([pairs[k] for k in indices])
            for k, p in zip(indices, decisions, strict=True):
                probs[k] = p
        return probs

    def close(self) -> None:
        """Close connections and stop the background loop (also done at garbage collection)."""
        self._finalizer()

    def __enter__(self) -> ServedJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- fallback ----------------------------------------------------------------------------

    def _fallback_decisions(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The fallback's decisions as 1.0/0.0, so the primary threshold keeps them.

        A fallback's scores live on its own scale (a cosine vs 0.8); the core compares with
        the primary judge's threshold, which lies in [0, 1), so hard decisions survive it.
        Lexical fallback: everything the lexical rules left undecided is distinct (0.0).
        """
        assert self.cfg.fallback is not None
        if self.fallback is None:
            return [0.0] * len(pairs)
        threshold = self.cfg.fallback.threshold
        return [1.0 if float(p) > threshold else 0.0 for p in self.fallback(pairs)]

    def _failure_summary(self, failed_requests: int, last_error: str | None) -> str:
        now = self._loop.time()
        endpoints = "; ".join(e.describe(now) for e in self.endpoints)
        return (
            f"served judge: {failed_requests} request(s) failed after up to "
            f"{self.cfg.max_attempts} attempt(s) each (deadline {self.cfg.deadline_s:g}s). "
            f"Endpoints: {endpoints}. Last error: {last_error}"
        )

    # -- event loop side ---------------------------------------------------------------------

    async def _classify(
        self, texts: list[str], tokens: list[int], firsts: list[str] | None
    ) -> tuple[list[float], list[list[int]], str | None]:
        """P(similar) per text; the pair indices of failed requests; the last error seen.

        firsts: each pair's first response (prefix affinity), or None (packed in order)."""
        if not self._net:
            # no connector cap: max_concurrency per endpoint is the only bound
            self._net["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            self._net["slot_freed"] = asyncio.Condition()
        deadline = self._loop.time() + self.cfg.deadline_s
        if firsts is None:
            spans = pack_requests(tokens, self.cfg.tokens_per_request, self.cfg.pairs_per_request)
            work = [[list(range(a, b))] for a, b in spans]
        else:
            work = [[members] for members in by_first_response(firsts)]
        tasks = [
            asyncio.create_task(self._send_group(texts, tokens, one[0], deadline)) for one in work
        ]
        if self.cfg.fallback is None:  # the first definitive failure fails the call: stop
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in tasks:
                task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        probs: list[float] = [0.0] * len(texts)
        failed: list[list[int]] = []
        last_error = None
        for (members,), result in zip(work, results, strict=True):
            outcomes = result if isinstance(result, list) else [(members, result)]
            for indices, outcome in outcomes:
                if isinstance(outcome, Refused):
                    raise ServedJudgeError(f"served judge: {outcome}")
                if isinstance(outcome, BadRequest):
                    raise ServedJudgeError(
                        f"served judge: the server rejected a request: {outcome}. Over-long "
                        "inputs: set judge.truncation=tokens with judge.tokenizer, or a smaller "
                        "max_length"
                    )
                if isinstance(outcome, BaseException):
                    failed.append(indices)
                    if not isinstance(outcome, asyncio.CancelledError):
                        last_error = str(outcome)
                else:
                    for k, p in zip(indices, outcome, strict=True):
                        probs[k] = p
        return probs, failed, last_error

    async def _send_group(
        self, texts: list[str], tokens: list[int], members: list[int], deadline: float
    ) -> list[tuple[list[int], Any]]:
        """One packed request (no affinity), or the pairs sharing a first response: the
        first alone, then the rest on the endpoint that answered it. Each request's indices
        with its probabilities or its exception; without a fallback the first exception is
        raised (the call fails)."""
        outcomes: list[tuple[list[int], Any]] = []
        chosen: dict[str, _Endpoint] = {}
        lead, rest = (members[:1], members[1:]) if self.affinity else (members, [])
        try:
            first = await self._request([texts[k] for k in lead], deadline, chosen)
            outcomes.append((lead, first))
        except (EndpointFailure, BadRequest) as err:
            if self.cfg.fallback is None:
                raise
            outcomes.append((lead, err))
        if not rest:
            return outcomes
        sizes = [tokens[k] for k in rest]
        spans = pack_requests(sizes, self.cfg.tokens_per_request, self.cfg.pairs_per_request)
        batches = [rest[a:b] for a, b in spans]
        prefer = chosen.get("endpoint")
        requests = [self._request([texts[k] for k in one], deadline, prefer) for one in batches]
        results = await asyncio.gather(*requests, return_exceptions=self.cfg.fallback is not None)
        outcomes += list(zip(batches, results, strict=True))
        return outcomes

    async def _request(
        self,
        texts: list[str],
        deadline: float,
        prefer: _Endpoint | dict[str, _Endpoint] | None = None,
    ) -> list[float]:
        """One request, retried on other endpoints until it succeeds or gives up.

        prefer: the endpoint to try first while it is in rotation (the one holding a first
        response's cached prefix), or a dict that receives the endpoint that answered."""
        for attempt in range(1, self.cfg.max_attempts + 1):
            pinned = prefer if isinstance(prefer, _Endpoint) and attempt == 1 else None
            endpoint = await self._acquire(deadline, pinned)
            try:
                remaining = deadline - self._loop.time()
                timeout = min(self.cfg.request_timeout_s, remaining)
                probs = await self._post(endpoint, texts, timeout)
                endpoint.last_error = None
                if isinstance(prefer, dict):
                    prefer["endpoint"] = endpoint
                return probs
            except EndpointFailure as err:
                self.stats["failed_requests"] += 1
                if isinstance(err, NoReply) and timeout < self.cfg.request_timeout_s:
                    # The call's deadline cut the wait short, not the endpoint: it stays in
                    # rotation (no failure counted, no cooldown), and no retry has time left.
                    raise EndpointFailure(
                        f"deadline of {self.cfg.deadline_s:g}s passed while waiting "
                        f"{timeout:.1f}s for {endpoint.url}"
                    ) from None
                endpoint.failures += 1
                endpoint.last_error = str(err)
                endpoint.resting_until = self._loop.time() + self.cfg.endpoint_cooldown_s
                log.info("served judge: %s failed (attempt %d): %s", endpoint.url, attempt, err)
                if attempt == self.cfg.max_attempts:
                    raise EndpointFailure(f"{endpoint.url}: {err}") from None
            finally:
                endpoint.in_flight -= 1
                async with self._net["slot_freed"]:
                    self._net["slot_freed"].notify_all()
            delay = min(self.cfg.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
            if self._loop.time() + delay >= deadline:
                raise EndpointFailure(f"deadline of {self.cfg.deadline_s:g}s passed")
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _acquire(self, deadline: float, pinned: _Endpoint | None = None) -> _Endpoint:
        """Reserve a slot on the least-loaded endpoint in rotation (waits for a free slot);
        on `pinned` alone while it is in rotation (its cache holds the request's prefix)."""
        slot_freed: asyncio.Condition = self._net["slot_freed"]
        while True:
            now = self._loop.time()
            if now >= deadline:
                raise EndpointFailure(f"deadline of {self.cfg.deadline_s:g}s passed")
            rotation = [e for e in self.endpoints if e.resting_until <= now]
            if pinned is not None and pinned in rotation:
                rotation = [pinned]
            if not rotation:
                first_back = min(self.endpoints, key=lambda e: e.resting_until)
                if self.cfg.fallback is not None:  # the fallback answers now, not after rests
                    raise EndpointFailure(
                        f"every endpoint is resting after failures ({first_back.url}: "
                        f"{first_back.last_error})"
                    )
                rotation = [first_back]  # no fallback: try the one whose rest ends first
            free = [e for e in rotation if e.in_flight < self.cfg.max_concurrency]
            if free:
                endpoint = min(free, key=lambda e: (e.in_flight, e.sent))
                endpoint.in_flight += 1
                endpoint.sent += 1
                return endpoint
            async with slot_freed:
                with contextlib.suppress(TimeoutError):  # the loop re-checks the deadline
                    await asyncio.wait_for(slot_freed.wait(), timeout=deadline - now)

    async def _post(self, endpoint: _Endpoint, texts: list[str], timeout: float) -> list[float]:
        session: aiohttp.ClientSession = self._net["session"]
        payload = classify_payload(texts, endpoint.model)
        self.stats["requests"] += 1
        await prove_endpoint(endpoint.url, self.token, timeout)
        try:
            async with session.post(
                f"{endpoint.url}/classify",
                json=payload,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=max(timeout, 1e-3)),
            ) as resp:
                body = await resp.text()
                status = resp.status
        except TimeoutError:
            raise NoReply(f"no reply within {timeout:.1f}s") from None
        except aiohttp.ClientError as err:
            raise EndpointFailure(f"{type(err).__name__}: {err}") from None
        if status == 401:
            raise Refused(auth.refusal(endpoint.url))
        if status == 400:
            raise BadRequest(f"{endpoint.url}: HTTP 400: {body[:300]}")
        if status != 200:
            raise EndpointFailure(f"HTTP {status}: {body[:200]}")
        probs = parse_reply(body, len(texts))
        self.stats["cached_tokens"] += cached_tokens(body)
        return probs


# ---------------------------------------------------------------------------------------------
# Start-up check
# ---------------------------------------------------------------------------------------------


def probe_served_judge(
    config: ServedJudgeConfig,
    timeout_s: float,
    key_path: str = "darling.judge.endpoints",
) -> None:
    """Check every endpoint of a served judge at once; raise one ServedJudgeError naming
    each bad endpoint and what is wrong with it, or return None when all are good.

    Each endpoint, within `timeout_s`: GET /health answers 200; GET /v1/models lists the
    endpoint's `model` (when it names one; the error lists what is served instead); POST
    /classify of one short pair gets a well-formed reply (so a server of a generative model,
    or one started without `--task classify`, is caught too). vLLM and
    `darling_nemo.classify_server` answer all three. Endpoints are checked concurrently, so
    the whole check takes at most about `timeout_s`. Meant to run before a trainer's long
    set-up; `key_path` is where the endpoints sit in the config, for the message.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    spec = PAIR_TEMPLATES[config.template]
    probe_text = f"{spec.cls_token} probe {spec.sep_token} probe {spec.sep_token}"

    token = auth.job_token()

    async def probe_all() -> list[str | None]:
        # trust_env=False (the default) as the judge's own session: proxies are not used
        async with aiohttp.ClientSession() as session:  # the token: per request, once proven
            checks = [
                _probe_endpoint(session, e.url, e.model, probe_text, timeout_s, token)
                for e in config.endpoints
            ]
            return await asyncio.gather(*checks)

    # A thread of its own, so this works from inside a running event loop too.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="served-judge-probe") as pool:
        problems = pool.submit(asyncio.run, probe_all()).result()
    for problem in problems:
        if problem is not None and problem.startswith(auth.REFUSAL_START):
            raise ServedJudgeError(problem)  # one line: nothing else matters until it is fixed
    bad = [
        f"  {key_path}[{k}] {endpoint.url}: {problem}"
        for k, (endpoint, problem) in enumerate(zip(config.endpoints, problems, strict=True))
        if problem is not None
    ]
    if bad:
        raise ServedJudgeError(
            f"served judge: {len(bad)} of {len(config.endpoints)} endpoint(s) failed the "
            f"start-up check (GET /health, GET /v1/models, POST /classify; {timeout_s:g}s "
            "each):\n" + "\n".join(bad)
        )


async def _probe_endpoint(
    session: aiohttp.ClientSession,
    url: str,
    model: str | None,
    probe_text: str,
    timeout_s: float,
    token: str | None,
) -> str | None:
    """What is wrong with one endpoint, or None."""
    step = "GET /health"
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(f"{url}/health") as resp:
                if resp.status != 200:
                    return f"{step}: HTTP {resp.status} (not a vLLM or classify_server?)"
            step = f"GET {auth.PROOF_PATH}"
            await prove_endpoint(url, token, timeout_s)
            headers = auth.bearer_header(token)
            step = "GET /v1/models"
            async with session.get(f"{url}/v1/models", headers=headers) as resp:
                body = await resp.text()
                if resp.status == 401:
                    return auth.refusal(url)
                if resp.status != 200:
                    return f"{step}: HTTP {resp.status}: {body[:200]}"
            try:
                served = [card["id"] for card in json.loads(body)["data"]]
            except (ValueError, KeyError, TypeError) as err:
                return f"{step}: not a model list ({err}): {body[:200]!r}"
            if model is not None and model not in served:
                names = ", ".join(repr(name) for name in served) or "nothing"
                return f"model {model!r} is not served there; it serves {names}"
            step = "POST /classify"
            payload = classify_payload([probe_text], model)
            async with session.post(f"{url}/classify", json=payload, headers=headers) as resp:
                body = await resp.text()
                if resp.status == 401:
                    return auth.refusal(url)
                if resp.status != 200:
                    return f"{step} of one pair: HTTP {resp.status}: {body[:200]}"
            parse_reply(body, 1)
    except TimeoutError:
        return f"{step}: no reply within {timeout_s:g}s"
    except aiohttp.ClientConnectorError as err:
        if isinstance(err.os_error, socket.gaierror):
            return f"host {err.host!r} not found ({err.os_error})"
        if getattr(err.os_error, "errno", None) == errno.ECONNREFUSED:
            return "connection refused (nothing listens on that port)"
        return f"cannot connect: {err.os_error or err}"
    except aiohttp.ClientError as err:
        return f"{step}: {type(err).__name__}: {err}"
    except Refused as err:
        return str(err)
    except EndpointFailure as err:
        return f"{step}: {err}"
    return None


def _shutdown(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, net: dict[str, Any]
) -> None:
    """Close the HTTP session on its loop, then stop the loop thread."""
    if not loop.is_running():
        return

    async def close_session() -> None:
        if "session" in net:
            await net["session"].close()

    with contextlib.suppress(Exception):  # shutting down anyway
        asyncio.run_coroutine_threadsafe(close_session(), loop).result(timeout=5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
