"""The per-job secret of the classifier servers: made by the job, checked by every server.

A job (a `.sub`, the recipe's own one-node server, `darling-serve-classifiers`, the
rehearsal) makes one random token at start (`new_token`) and hands it to its servers and
its driver through the environment (`DARLING_JUDGE_TOKEN`) or a file only its user can read
(`DARLING_JUDGE_TOKEN_FILE`, mode 0600): never on a command line, which `ps` and job logs
show. A user who runs a server by hand sets either variable to a token of their own.

Every server refuses a request without `Authorization: Bearer <token>` (401, JSON body),
on every path but `/health` (schedulers and the launchers poll it before they hold the
token's reader). vLLM 0.10.0 applies `BearerTokenAuth` to every request when started with
`--middleware darling_nemo.judges.auth.BearerTokenAuth` (its own extension point:
`app.add_middleware(cls)`); vLLM's `--api-key` would not do, it checks only paths under
`/v1` and `/classify` is not one. `darling_nemo.classify_server` takes the same flag and
checks with `authorized`. Pure ASGI (no framework) and the standard library: it runs inside
vLLM's process, which imports it by that path.

The client knows its server: before a client sends the token to an endpoint, the endpoint
proves that it holds it. The client draws a random nonce and asks `GET /darling/proof?nonce=
<hex>` (open, like /health); the server answers `{"proof": HMAC-SHA256(token, PROOF_DOMAIN +
nonce)}` in hex; the client compares in constant time (`prove_server`, once per URL and token
in a process). Anything else (404, a wrong proof, not JSON) and the client refuses with one
line (`UnprovenServerError`) without ever sending the token: a program squatting on the port,
or a server of another job, never gets it. /health proves nothing: liveness only.

A server started without its token does not start: vLLM resolves the middleware's name
(`BearerTokenAuth`, through this module's `__getattr__`) while it builds its app, and that
exits with one line and status 2 when no token is set; Starlette builds the middleware itself
only at the first request, where uvicorn would log the error and serve 500s instead.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import sys
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from darling_nemo.judges import JudgeError

TOKEN_ENV = "DARLING_JUDGE_TOKEN"
TOKEN_FILE_ENV = "DARLING_JUDGE_TOKEN_FILE"
MIDDLEWARE = "darling_nemo.judges.auth.BearerTokenAuth"  # vLLM's --middleware value
PROOF_PATH = "/darling/proof"  # GET ?nonce=<hex>: the server proves it holds the token
PROOF_DOMAIN = b"darling-judge-proof-v1\n"  # so a proof is never a MAC of anything else
NONCE = re.compile(r"[0-9a-f]{32,128}")  # the nonces a server signs: hex, 128 to 512 bits
OPEN_PATHS = frozenset({"/health"})  # and PROOF_PATH, answered before any token check
TOKEN_BYTES = 32  # secrets.token_urlsafe: 43 characters, 256 bits

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class TokenError(JudgeError):
    """No usable token where one is required (the message names the variable)."""


class UnprovenServerError(JudgeError):
    """An endpoint did not prove that it holds this job's token: the token was not sent."""


# What counts as a secret in an environment: the variables the jobs know carry one, and any
# name that says so. Ray gets an allow-list of variables (nemo_rl/ray_env.py), which never
# passes these names even under an allowed prefix; a rehearsal looks for their values (and
# for secrets it plants under other names) in everything it leaves behind
# (rehearsal/secrets_check.py).
KNOWN_SECRETS = frozenset({TOKEN_ENV, "WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
SECRET_NAME = re.compile(
    r"(^|_)TOKENS?(_|$)|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|(^|_)KEY(_|$)"
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (TOKEN_FILE names a
    path, not a secret)."""
    upper = name.upper()
    return name in KNOWN_SECRETS or (
        not upper.endswith("_FILE") and SECRET_NAME.search(upper) is not None
    )


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def job_token(environ: Mapping[str, str] | None = None) -> str | None:
    """This job's token: DARLING_JUDGE_TOKEN, else the file DARLING_JUDGE_TOKEN_FILE names;
    None when neither is set. A file that others can read, or an empty one, is refused."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    path = env.get(TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        mode = os.stat(path).st_mode
        token = Path(path).read_text().strip()
    except OSError as err:
        raise TokenError(f"{TOKEN_FILE_ENV}={path}: cannot read it ({err.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(
            f"{TOKEN_FILE_ENV}={path}: others can read it (mode {stat.S_IMODE(mode):o}); "
            f"chmod 600 {path}"
        )
    if not token:
        raise TokenError(f"{TOKEN_FILE_ENV}={path}: the file is empty")
    return token


def required_token(environ: Mapping[str, str] | None = None) -> str:
    token = job_token(environ)
    if token is None:
        raise TokenError(
            f"no token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}, a file of mode 0600) in the "
            "server's environment; the servers accept no request without it"
        )
    return token


def write_token_file(path: str | os.PathLike[str], token: str) -> Path:
    """Write the token to a new file that only this user can read (0600 from its creation,
    never wider); an existing file is replaced the same way."""
    target = Path(path)
    target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return target


REFUSAL_START = "the judge server at "


def refusal(url: str) -> str:
    """The one line a client says when a server answers 401."""
    return f"{REFUSAL_START}{url} refused this job's token: was it started by another job?"


def bearer_header(token: str | None) -> dict[str, str]:
    """The request header a client sends ({} without a token: the server will say 401)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def authorized(path: str, authorization: str | bytes | None, token: str) -> bool:
    """Whether a request may pass: an open path, or exactly `Bearer <token>` (compared in
    constant time, so the reply's timing tells nothing about the token)."""
    if path in OPEN_PATHS:
        return True
    if authorization is None:
        return False
    given = authorization if isinstance(authorization, bytes) else authorization.encode()
    return hmac.compare_digest(given, f"Bearer {token}".encode())


def proof(token: str, nonce: str) -> str:
    """What a server holding `token` answers for `nonce` (HMAC-SHA256, hex)."""
    return hmac.new(token.encode(), PROOF_DOMAIN + nonce.encode(), hashlib.sha256).hexdigest()


def proof_reply(query_string: str | bytes, token: str) -> tuple[int, dict[str, Any]]:
    """The server's answer to GET PROOF_PATH?<query_string>: (status, JSON body)."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    nonces = urllib.parse.parse_qs(query_string).get("nonce", [])
    if len(nonces) != 1 or NONCE.fullmatch(nonces[0]) is None:
        return 400, {"error": "one nonce: 32 to 128 lowercase hex digits"}
    return 200, {"proof": proof(token, nonces[0])}


_PROVEN: set[tuple[str, str]] = set()  # (url, the token's hash): proven in this process
_PROVEN_LOCK = threading.Lock()


def _proven_key(url: str, token: str) -> tuple[str, str]:
    return url.rstrip("/"), hashlib.sha256(token.encode()).hexdigest()


def proven(url: str, token: str) -> bool:
    """Whether the server at `url` proved it holds `token` before, in this process."""
    with _PROVEN_LOCK:
        return _proven_key(url, token) in _PROVEN


def prove_server(url: str, token: str | None, timeout_s: float = 10.0) -> None:
    """Return once the server at `url` has proved it holds `token` (at once when it did
    before in this process, or when there is no token to protect). UnprovenServerError when
    it answers but not with the proof; OSError (TimeoutError too) when it does not answer:
    the caller decides whether that is a dead endpoint. Never sends the token."""
    if not token:
        return
    if proven(url, token):
        return
    key = _proven_key(url, token)
    nonce = secrets.token_hex(32)
    status, body = _get(f"{key[0]}{PROOF_PATH}?nonce={nonce}", timeout_s)
    try:
        given = json.loads(body)["proof"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        given = None
    if status != 200:
        why = f"GET {PROOF_PATH} answered HTTP {status}"
    elif not isinstance(given, str) or not hmac.compare_digest(
        given.encode(), proof(token, nonce).encode()
    ):
        why = f"GET {PROOF_PATH} answered no proof, or a wrong one"
    else:
        with _PROVEN_LOCK:
            _PROVEN.add(key)
        return
    raise UnprovenServerError(
        f"the judge server at {key[0]} did not prove it holds this job's token ({why}); the "
        "token was not sent: is another program on that port, a server of another job, or one "
        "started without the token?"
    )


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    """GET without proxies (as the served judge's own session) and without any token."""
    # lazy: vLLM's server imports this module for its middleware and never calls this;
    # http.client (and the email parser under it) is about half of this module's import time
    import http.client

    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        reply = conn.getresponse()
        return reply.status, reply.read(4096)  # a proof is ~80 bytes: read no more
    except http.client.HTTPException as err:  # a reply that is not HTTP: an error of its own
        raise OSError(f"not an HTTP reply ({type(err).__name__}: {err})") from None
    finally:
        conn.close()


UNAUTHORIZED_BODY = {
    "object": "error",
    "message": f"missing or wrong Authorization: Bearer token (this job's {TOKEN_ENV})",
    "type": "Unauthorized",
    "param": None,
    "code": 401,
}


def _authorization(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    values = [value for name, value in headers if name.lower() == b"authorization"]
    return values[0] if len(values) == 1 else None  # two headers: ambiguous, refused


class TokenAuth:
    """ASGI middleware: every HTTP or websocket request but GET /health must carry
    `Authorization: Bearer <token>`; others get 401 with a JSON body (a websocket is
    closed). GET PROOF_PATH gets the token's proof for the client's nonce. vLLM takes it as
    `BearerTokenAuth` (this module's `__getattr__`, which stops a server without a token)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.token = required_token()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: start-up and shutdown
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] == "http" and path == PROOF_PATH:
            await _send_json(send, *proof_reply(scope.get("query_string", b""), self.token))
            return
        if authorized(path, _authorization(scope.get("headers", [])), self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _send_json(send, 401, UNAUTHORIZED_BODY, ((b"www-authenticate", b"Bearer"),))


async def _send_json(
    send: Send, status: int, body: Mapping[str, Any], extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": data})


def __getattr__(name: str) -> Any:
    """`BearerTokenAuth`, the name vLLM's --middleware resolves while it builds its app:
    without a token the server stops there, with one line and status 2. The class itself
    reads the token too, but Starlette builds it only at the first request (uvicorn then
    logs the error and serves 500s): too late."""
    if name != "BearerTokenAuth":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        required_token()
    except TokenError as err:
        print(f"{MIDDLEWARE}: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    return TokenAuth
