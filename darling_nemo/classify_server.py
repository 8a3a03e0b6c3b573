"""A `/classify` server for machines without vLLM: the same protocol, a local checkpoint.

    python -m darling_nemo.classify_server serve MODEL --task classify --port 8000 \
        --served-model-name similarity_gpu_0 [--host 127.0.0.1] [--dtype auto] [--device auto]

The command line mirrors `vllm serve ... --task classify`, so `darling-serve-classifiers`
can start either (its `executable` setting). The protocol mirrors vLLM 0.10:

    POST /classify  {"model": name, "input": str | [str, ...], "truncate_prompt_tokens": k?}
      200 {"id", "object": "list", "created", "model",
           "data": [{"index", "label", "probs", "num_classes"}, ...],
           "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0, ...}}
      400 over-long input / bad request, 404 unknown model: {"object": "error", "message",
          "type", "param", "code"}
    GET /health (200), GET /v1/models (vLLM's model list: id = the served name, root,
    max_model_len), which `judges.served.probe_served_judge` reads at start-up,
    GET /metrics (vLLM's prefix-cache counters, in tokens, Prometheus text)

With `--middleware darling_nemo.judges.auth.BearerTokenAuth` (the flag vLLM takes for the
same middleware) every path but /health needs `Authorization: Bearer <token>`, the token
from DARLING_JUDGE_TOKEN or DARLING_JUDGE_TOKEN_FILE (judges/auth.py); else 401.

Prefix caching follows vLLM 0.10.0's rule for a classify server: on for a causal classifier
served with `--override-pooler-config '{"pooling_type":"LAST"}'` (unless
`--no-enable-prefix-caching`), off otherwise and always for encoders. When on, an input
reuses the keys/values of the longest whole-block prefix it shares with a recent input
(`judges.prefix_cache`); a reply's `usage.prompt_tokens_details.cached_tokens` counts the
reused tokens, and the log line at exit and /metrics the totals.

Each input text is tokenized with the tokenizer's own special tokens (vLLM's default), and
inputs longer than the model are rejected (vLLM does the same). A hostile or broken client
cannot stall the server: a body over --max-body-bytes (Content-Length, checked before a byte
is read) and an input over max_model_len x MAX_CHARS_PER_TOKEN characters (checked before
it is tokenized) are refused at once, as is a body of any other bad shape (not UTF-8, not
JSON, nested too deeply, wrong types): each with 400 and vLLM's JSON error. Concurrent
requests are batched together (like vLLM's continuous batching): one worker drains the queue
into forward passes of at most --max-batch-size texts. With --port 0 the OS picks a free port;
the line `READY http://host:port` on stdout says where.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from aiohttp import web

from darling_nemo.judges import auth, conn_guard
from darling_nemo.judges.cross_encoder import SequenceClassifier
from darling_nemo.judges.prefix_cache import BLOCK_TOKENS, PrefixCache, is_causal_classifier
from darling_nemo.schema import CrossEncoderJudgeConfig, ServedJudgeConfig
from darling_nemo.schema_keys import choices

Scored = tuple[np.ndarray, np.ndarray]  # probabilities, cached tokens per input

# Tokenizing is the one step whose cost a client sets without bound: a 50 MB input took 71 s
# of the classifier's one thread (every other request waited) and kept 3.7 GB, all to learn
# that it is too long. So inputs are bounded in characters before they are tokenized. A
# token of text or code spans about 4 characters; 32 is 8 times that, so an input refused
# for its characters could not have fit the model, short of text made of runs that the
# tokenizer maps to one token each (BERT's [UNK] for a word over 100 characters, runs of
# spaces): such inputs are refused too.
MAX_CHARS_PER_TOKEN = 32
# The default body limit holds this many inputs of the model's full length at
# MAX_CHARS_PER_TOKEN bytes a token: the served judge's largest request of short pairs.
FULL_INPUTS_PER_BODY = ServedJudgeConfig.model_fields["pairs_per_request"].default


def max_input_chars(max_model_len: int) -> int:
    """The most characters an input may have to be tokenized at all."""
    return max_model_len * MAX_CHARS_PER_TOKEN


def default_max_body_bytes(max_model_len: int) -> int:
    return FULL_INPUTS_PER_BODY * max_input_chars(max_model_len)


def error_response(message: str, status: int, kind: str = "BadRequestError") -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


class Batcher:
    """Runs queued token-id lists through the classifier in shared forward passes."""

    def __init__(
        self,
        classifier: SequenceClassifier,
        max_batch_size: int,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.classifier = classifier
        self.max_batch_size = max_batch_size
        self.prefix_cache = prefix_cache
        # One thread owns the model and its tokenizer: tokenisation and forward passes keep
        # the event loop free for other requests, and a fast tokenizer (which may reset its
        # truncation state on a call) is never used from two threads at once.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="classifier")
        self.queue: asyncio.Queue[tuple[list[list[int]], asyncio.Future[Scored]]] = asyncio.Queue()

    def score(self, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities and the cached (reused) tokens of each input."""
        if self.prefix_cache is None:
            probs = self.classifier.probs_from_ids(ids, self.max_batch_size)
            return probs, np.zeros(len(ids), dtype=np.int64)
        return self.prefix_cache.probs_and_hits(ids)  # in arrival order

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self.queue.get()]
            size = len(jobs[0][0])
            while not self.queue.empty() and size < self.max_batch_size:
                jobs.append(self.queue.get_nowait())
                size += len(jobs[-1][0])
            ids = [seq for job_ids, _ in jobs for seq in job_ids]
            try:
                probs, hits = await loop.run_in_executor(self.executor, self.score, ids)
            except Exception as err:  # a model failure answers every waiting request
                for _, future in jobs:
                    if not future.done():
                        future.set_exception(err)
                continue
            start = 0
            for job_ids, future in jobs:
                if not future.done():
                    end = start + len(job_ids)
                    future.set_result((probs[start:end], hits[start:end]))
                start += len(job_ids)

    async def encode(self, texts: list[str]) -> list[list[int]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.classifier.encode, texts)

    async def classify(self, ids: list[list[int]]) -> Scored:
        future: asyncio.Future[Scored] = asyncio.get_running_loop().create_future()
        await self.queue.put((ids, future))
        return await future


async def request_body(request: web.Request, max_body_bytes: int) -> Any:
    """The JSON a request carries, or the 400 response naming what is wrong with it. A body
    announced (Content-Length) over the limit is refused before a byte of it is read; one
    sent in chunks is cut off at the limit (the app's client_max_size)."""
    announced = request.content_length
    if announced is not None and announced > max_body_bytes:
        return error_response(body_too_large(f"{announced} bytes", max_body_bytes), 400)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_response(body_too_large("over the limit", max_body_bytes), 400)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        where = f"byte 0x{raw[err.start]:02x} at offset {err.start}"
        return error_response(f"request body is not UTF-8 text: {where}", 400)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        return error_response(f"request body is not valid JSON: {err.msg} ({where})", 400)
    except RecursionError:  # e.g. 200,000 nested `[`: json gives up past Python's stack limit
        return error_response("request body nests too deeply to parse", 400)


def body_too_large(size: str, max_body_bytes: int) -> str:
    return (
        f"request body is {size}; this server takes at most {max_body_bytes} bytes "
        "(classify_server --max-body-bytes)"
    )


def request_texts(body: Any, served_name: str, max_chars: int) -> list[str] | web.Response:
    """The texts a /classify body asks for, or the error response vLLM gives. An input over
    `max_chars` characters is refused here, before it is tokenized."""
    if not isinstance(body, dict):
        return error_response("request body must be a JSON object", 400)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        return error_response(f"`model` must be a string, got {type(model).__name__}", 400)
    if model is not None and model != served_name:
        return error_response(f"The model `{model}` does not exist.", 404, "NotFoundError")
    texts = body.get("input")
    if isinstance(texts, str):
        if not texts:
            return error_response("Input cannot be empty for classification", 400)
        texts = [texts]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return error_response("`input` must be a string or a list of strings", 400)
    for k, text in enumerate(texts):
        if len(text) > max_chars:
            return error_response(
                f"input[{k}] has {len(text)} characters; this server tokenizes at most "
                f"{max_chars} (its maximum context length x {MAX_CHARS_PER_TOKEN} characters "
                "a token), so it cannot fit the model. Please reduce the length of the input.",
                400,
            )
    return texts


def tokens_to_keep(body: dict[str, Any], max_model_len: int) -> int | web.Response | None:
    """vLLM's `truncate_prompt_tokens`: keep the last k tokens (-1: the model's length);
    None when absent; the 400 response when it is not such a number."""
    keep = body.get("truncate_prompt_tokens")
    if keep is None:
        return None
    if isinstance(keep, bool) or not isinstance(keep, int) or not (keep == -1 or keep > 0):
        return error_response(
            f"`truncate_prompt_tokens` must be a positive integer or -1, got {keep!r}", 400
        )
    return max_model_len if keep == -1 else keep


def too_long_response(ids: list[list[int]], max_model_len: int) -> web.Response | None:
    for seq in ids:
        if len(seq) > max_model_len:
            return error_response(
                f"This model's maximum context length is {max_model_len} tokens. However, "
                f"you requested {len(seq)} tokens in the input for classification. Please "
                "reduce the length of the input.",
                400,
            )
    return None


def classify_body(
    classifier: SequenceClassifier,
    served_name: str,
    ids: list[list[int]],
    probs: np.ndarray,
    cached_tokens: int | None = None,  # None: no prefix cache (vLLM then reports no details)
) -> dict[str, Any]:
    data = [
        {
            "index": k,
            "label": classifier.id2label.get(int(np.argmax(p))),
            "probs": [float(x) for x in p],
            "num_classes": len(p),
        }
        for k, p in enumerate(probs)
    ]
    tokens = sum(len(seq) for seq in ids)
    return {
        "id": f"classify-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": served_name,
        "data": data,
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": (
                None if cached_tokens is None else {"cached_tokens": cached_tokens}
            ),
        },
    }


def token_check(token: str | None) -> Any:
    """The aiohttp middleware that answers 401 unless a request carries the token, and the
    token's proof at auth.PROOF_PATH, as judges.auth.BearerTokenAuth does in vLLM (every path
    but /health); None: no check (and no proof: a client holding a token refuses us)."""

    @web.middleware
    async def require_token(request: web.Request, handler: Any) -> web.StreamResponse:
        if token is not None and request.path == auth.PROOF_PATH:
            status, body = auth.proof_reply(request.query_string, token)
            return web.json_response(body, status=status)
        given = request.headers.getall("Authorization", [])
        if token is None or auth.authorized(
            request.path, given[0] if len(given) == 1 else None, token
        ):
            if request.path not in auth.OPEN_PATHS:  # /health proves nothing about a client
                conn_guard.authenticated(request)
            return await handler(request)
        return web.json_response(
            auth.UNAUTHORIZED_BODY, status=401, headers={"WWW-Authenticate": "Bearer"}
        )

    return require_token


def prefix_cache_metrics(prefix_cache: PrefixCache | None, served_name: str) -> str:
    """vLLM's prefix-cache counters in Prometheus' text format (zero without a cache)."""
    stats = prefix_cache.stats() if prefix_cache is not None else {}
    lines = []
    for name in ("prefix_cache_queries", "prefix_cache_hits"):
        lines += [
            f"# TYPE vllm:{name}_total counter",
            f'vllm:{name}_total{{model_name="{served_name}"}} {float(stats.get(name, 0))}',
        ]
    return "\n".join(lines) + "\n"


def make_app(
    classifier: SequenceClassifier,
    served_name: str,
    max_model_len: int,
    max_batch_size: int,
    model_path: str | None = None,  # what /v1/models reports as `root`; None: served_name
    die_at_classify: int | None = None,  # failure drills: crash when request N arrives
    prefix_cache: PrefixCache | None = None,
    token: str | None = None,  # every path but /health needs it (judges/auth.py); None: open
    max_body_bytes: int | None = None,  # None: default_max_body_bytes(max_model_len)
) -> web.Application:
    batcher = Batcher(classifier, max_batch_size, prefix_cache)
    received = 0
    if max_body_bytes is None:
        max_body_bytes = default_max_body_bytes(max_model_len)

    async def classify(request: web.Request) -> web.Response:
        nonlocal received
        received += 1
        if die_at_classify is not None and received >= die_at_classify:
            os._exit(1)  # a crash mid-request, not a shutdown: the client's connection drops
        body = await request_body(request, max_body_bytes)
        if isinstance(body, web.Response):
            return body
        texts = request_texts(body, served_name, max_input_chars(max_model_len))
        if isinstance(texts, web.Response):
            return texts
        keep = tokens_to_keep(body, max_model_len)
        if isinstance(keep, web.Response):
            return keep
        ids = await batcher.encode(texts) if texts else []
        if keep is not None:
            ids = [seq[-keep:] for seq in ids]  # vLLM keeps the last k tokens
        too_long = too_long_response(ids, max_model_len)
        if too_long is not None:
            return too_long
        if not ids:
            empty = np.zeros((0, classifier.num_labels))
            return web.json_response(classify_body(classifier, served_name, ids, empty))
        probs, hits = await batcher.classify(ids)
        cached = None if prefix_cache is None else int(hits.sum())
        return web.json_response(classify_body(classifier, served_name, ids, probs, cached))

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(_: web.Request) -> web.Response:
        card = {  # vLLM's model card (its `permission` list left out)
            "id": served_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "darling-nemo",
            "root": model_path or served_name,
            "parent": None,
            "max_model_len": max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(_: web.Request) -> web.Response:
        text = prefix_cache_metrics(prefix_cache, served_name)
        return web.Response(text=text, content_type="text/plain")

    async def start_batcher(app: web.Application) -> Any:
        task = asyncio.create_task(batcher.run())
        yield
        task.cancel()
        batcher.executor.shutdown(wait=False, cancel_futures=True)

    # a chunked body is cut off at max_body_bytes too
    app = web.Application(client_max_size=max_body_bytes, middlewares=[token_check(token)])
    app.router.add_post("/classify", classify)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(start_batcher)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(app)
    await runner.setup()
    # not a TCPSite: connections that never finish a request are closed (judges/conn_guard.py)
    server = await conn_guard.start_guarded(runner, host, port)
    bound = server.sockets[0].getsockname()[1]  # the real port when port was 0
    print(f"READY http://{host}:{bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        server.close()
        await runner.cleanup()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m darling_nemo.classify_server",
        description="Serve a sequence-classification checkpoint with vLLM's /classify protocol.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serve MODEL (same flags as `vllm serve --task classify`)")
    p.add_argument("model", help="path or hub name of a sequence-classification checkpoint")
    p.add_argument("--task", default="classify", choices=["classify"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: any free port")
    p.add_argument("--served-model-name", default=None, help="default: the model argument")
    dtypes = choices(CrossEncoderJudgeConfig.model_fields["dtype"].annotation)
    defaults = CrossEncoderJudgeConfig()  # the in-process judge's: one default, in the schema
    p.add_argument("--dtype", default=defaults.dtype, choices=dtypes)
    p.add_argument("--device", default=defaults.device, help="auto: cuda if available, else cpu")
    p.add_argument("--max-model-len", type=int, default=None, help="default: the model's")
    p.add_argument("--max-batch-size", type=int, default=32, help="texts per forward pass")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help=f"largest request body; default: {FULL_INPUTS_PER_BODY} inputs of the model's "
        f"full length at {MAX_CHARS_PER_TOKEN} bytes a token",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="vLLM's flag, accepted so the same command line runs here; no memory pool: ignored",
    )
    p.add_argument(
        "--override-pooler-config",
        default=None,
        help='vLLM\'s flag; \'{"pooling_type":"LAST"}\' turns prefix caching on (causal models)',
    )
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--block-size",
        type=int,
        default=BLOCK_TOKENS,
        help="vLLM's flag: tokens per cache block; only whole blocks of a prefix are reused",
    )
    p.add_argument(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM's flag, accepted so the same command line runs here; no scheduler: ignored",
    )
    p.add_argument(
        "--middleware",
        action="append",
        default=[],
        help=f"vLLM's flag; {auth.MIDDLEWARE} (the only one taken) checks the job's token",
    )
    p.add_argument(
        "--die-at-classify",
        type=int,
        default=None,
        metavar="N",
        help="failure drills: the process dies when its N-th /classify request arrives",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for flag, value in (
        ("--block-size", args.block_size),
        ("--max-body-bytes", args.max_body_bytes),
    ):
        if value is not None and value < 1:
            print(f"classify_server: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 2
    unknown = sorted(set(args.middleware) - {auth.MIDDLEWARE})
    if unknown:
        print(
            f"classify_server: --middleware {unknown[0]}: only {auth.MIDDLEWARE}", file=sys.stderr
        )
        return 2
    try:
        token = auth.required_token() if args.middleware else None
    except auth.TokenError as err:
        print(f"classify_server: {err}", file=sys.stderr)
        return 2
    try:
        classifier = SequenceClassifier(args.model, args.device, args.dtype)
        pooling = pooling_type(args.override_pooler_config)
    except ValueError as err:
        print(f"classify_server: {err}", file=sys.stderr)
        return 2
    max_model_len = args.max_model_len or classifier.max_length
    name = args.served_model_name or args.model
    caching, why = prefix_caching(classifier, pooling, args.enable_prefix_caching)
    cache = PrefixCache(classifier.model, args.block_size) if caching else None
    app = make_app(
        classifier,
        name,
        max_model_len,
        args.max_batch_size,
        args.model,
        args.die_at_classify,
        cache,
        token=token,
        max_body_bytes=args.max_body_bytes,
    )
    print(
        f"classify_server: {args.model} as {name!r} on {classifier.device}, "
        f"max_model_len {max_model_len}, prefix caching {'on' if caching else 'off'} ({why})",
        flush=True,
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(app, args.host, args.port))
    finally:
        if cache is not None:
            print(f"classify_server: prefix cache {cache_summary(cache)}", flush=True)
    return 0


def pooling_type(override: str | None) -> str | None:
    """The pooling type --override-pooler-config asks for (vLLM's JSON), or None."""
    if override is None:
        return None
    try:
        value = json.loads(override)
    except json.JSONDecodeError as err:
        raise ValueError(f"--override-pooler-config is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise ValueError(f"--override-pooler-config must be a JSON object, got {override!r}")
    kind = value.get("pooling_type")
    return None if kind is None else str(kind).upper()


def prefix_caching(
    classifier: SequenceClassifier, pooling: str | None, requested: bool | None
) -> tuple[bool, str]:
    """vLLM 0.10.0's decision for a classify server, and why."""
    if not is_causal_classifier(classifier.model):
        return False, "an encoder attends both ways: no prefix to reuse"
    if pooling != "LAST":
        return False, "vLLM 0.10.0 caches only with pooling_type LAST"
    if requested is False:
        return False, "--no-enable-prefix-caching"
    return True, "causal classifier, LAST pooling"


def cache_summary(cache: PrefixCache) -> str:
    stats = cache.stats()
    queries, hits = stats["prefix_cache_queries"], stats["prefix_cache_hits"]
    share = hits / queries if queries else 0.0
    return (
        f"hits {hits} of {queries} prompt tokens ({share:.1%}), "
        f"{stats['prefix_cache_hit_inputs']} input(s) with a hit"
    )


if __name__ == "__main__":
    sys.exit(main())
