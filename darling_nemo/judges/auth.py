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
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from darling_nemo.judges import JudgeError

TOKEN_ENV = "DARLING_JUDGE_TOKEN"
TOKEN_FILE_ENV = "DARLING_JUDGE_TOKEN_FILE"
MIDDLEWARE = "darling_nemo.judges.auth.BearerTokenAuth"  # vLLM's --middleware value
OPEN_PATHS = frozenset({"/health"})
TOKEN_BYTES = 32  # secrets.token_urlsafe: 43 characters, 256 bits

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class TokenError(JudgeError):
    """No usable token where one is required (the message names the variable)."""


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


class BearerTokenAuth:
    """ASGI middleware: every HTTP or websocket request but GET /health must carry
    `Authorization: Bearer <token>`; others get 401 with a JSON body (a websocket is
    closed). The token is read from the environment when the middleware is built, so a
    server without one fails at start-up instead of serving anyone."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.token = required_token()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: start-up and shutdown
            await self.app(scope, receive, send)
            return
        if authorized(scope.get("path", ""), _authorization(scope.get("headers", [])), self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(UNAUTHORIZED_BODY).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
