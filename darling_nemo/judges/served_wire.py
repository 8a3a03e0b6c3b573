"""The served judge's wire: vLLM 0.10's /classify request and reply, how a call's pairs are
cut into requests, what a failure means (retry elsewhere, or stop), and the proof an
endpoint gives before it gets this job's token (judges/auth.py). Used by judges/served.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Sequence
from typing import Any

from darling_nemo.judges import auth


class EndpointFailure(Exception):
    """The endpoint's fault (down, slow, broken reply): retry on another endpoint."""


class NoReply(EndpointFailure):
    """No reply within the request's timeout."""


class BadRequest(Exception):
    """The request's fault (HTTP 400): no endpoint will accept it."""


class Refused(BadRequest):
    """HTTP 401, or no proof: the server does not hold this job's token."""


def classify_payload(texts: list[str], model: str | None) -> dict[str, Any]:
    """The /classify request body (rehearsal.contract_classifier checks it against vLLM's)."""
    payload: dict[str, Any] = {"input": texts}
    if model is not None:
        payload["model"] = model
    return payload


def parse_reply(body: str, expected: int) -> list[float]:
    """P(similar) per input from a /classify reply body; raise EndpointFailure if malformed."""
    try:
        reply = json.loads(body)
        data = reply["data"]
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else type(data).__name__
            raise ValueError(f"expected {expected} results in `data`, got {got}")
        indices = [item.get("index", k) for k, item in enumerate(data)]
        if sorted(indices) != list(range(expected)):
            raise ValueError(f"result indices are not 0..{expected - 1}")
        probs: list[float] = [0.0] * expected
        for index, item in zip(indices, data, strict=True):
            p = item["probs"]
            if not isinstance(p, list) or len(p) < 2:
                raise ValueError(f"`probs` of result {index} is not a list of >= 2 numbers")
            last = float(p[-1])
            if not (math.isfinite(last) and -1e-6 <= last <= 1 + 1e-6):
                raise ValueError(f"probs[-1] of result {index} is {last}, not a probability")
            probs[index] = last
        return probs
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise EndpointFailure(f"malformed reply ({err}): {body[:200]!r}") from None


def cached_tokens(body: str) -> int:
    """`usage.prompt_tokens_details.cached_tokens` of a reply (0 when the server says none)."""
    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
        details = json.loads(body)["usage"]["prompt_tokens_details"] or {}
        return int(details.get("cached_tokens") or 0)
    return 0


def by_first_response(firsts: Sequence[str]) -> list[list[int]]:
    """Pair indices grouped by their first response, groups and members in call order."""
    groups: dict[str, list[int]] = {}
    for k, first in enumerate(firsts):
        groups.setdefault(first, []).append(k)
    return list(groups.values())


def pack_requests(
    tokens: Sequence[int], tokens_per_request: int, pairs_per_request: int
) -> list[tuple[int, int]]:
    """Cut pairs, in order, into requests: [start, stop) spans of at most `pairs_per_request`
    pairs whose token counts sum to at most `tokens_per_request`; a pair longer than the
    budget goes alone. Greedy, which gives the fewest requests any in-order cut can."""
    spans: list[tuple[int, int]] = []
    start, used = 0, 0
    for k, count in enumerate(tokens):
        if k > start and (used + count > tokens_per_request or k - start == pairs_per_request):
            spans.append((start, k))
            start, used = k, 0
        used += count
    if len(tokens) > start:
        spans.append((start, len(tokens)))
    return spans


async def prove_endpoint(url: str, token: str | None, timeout: float) -> None:
    """The endpoint proves that it holds the token before it is sent (once per process)."""
    if token is None or auth.proven(url, token):
        return
    try:
        await asyncio.to_thread(auth.prove_server, url, token, max(timeout, 1e-3))
    except auth.UnprovenServerError as err:
        raise Refused(str(err)) from None
    except TimeoutError:
        raise NoReply(f"no reply within {timeout:.1f}s") from None
    except OSError as err:
        raise EndpointFailure(f"{type(err).__name__}: {err}") from None
