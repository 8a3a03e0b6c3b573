"""The per-job secret of the classifier servers (darling_nemo/judges/auth.py), attacked:
the vLLM middleware under a real ASGI server (uvicorn, as vLLM serves it) and the real
`classify_server` with the same flag; the served judge and a run against a server of
another job; the token's file and what counts as a secret."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, wait_ready

from darling_nemo.judges import auth, make_judge
from darling_nemo.judges.served import ServedJudgeError, probe_served_judge
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import validate_darling

JOB_TOKEN = auth.new_token()
OTHER_JOB_TOKEN = auth.new_token()  # a token replayed from another job's servers


def request(
    url: str, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
) -> tuple[int, dict]:
    """One request with exactly these headers (repeated names too); (status, JSON or {})."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.putrequest(method, path)
        for name, value in [*headers, ("Content-Length", str(len(body)))]:
            conn.putheader(name, value)
        conn.endheaders(body)
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, (json.loads(data) if data.strip().startswith(b"{") else {})
    finally:
        conn.close()


def attacks(token: str) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """What another user on the network tries: (path, headers) by name."""
    bearer = f"Bearer {token}"
    return {
        "no token": ("/classify", []),
        "a wrong token": ("/classify", [("Authorization", "Bearer not-the-token")]),
        "the token in the query string": (f"/classify?token={token}&api_key={token}", []),
        "the token without Bearer": ("/classify", [("Authorization", token)]),
        "a replayed token of another job": (
            "/classify",
            [("Authorization", f"Bearer {OTHER_JOB_TOKEN}")],
        ),
        "two Authorization headers": (
            "/classify",
            [("Authorization", "Bearer x"), ("Authorization", bearer)],
        ),
        "the model list": ("/v1/models", []),
        "a path under /health": ("/health/../classify", []),
    }


def assert_refuses_every_attack(url: str) -> None:
    body = json.dumps({"input": ["[CLS] a [SEP] b [SEP]"]}).encode()
    for name, (path, headers) in attacks(JOB_TOKEN).items():
        method = "GET" if path.startswith("/v1") else "POST"
        status, reply = request(url, method, path, headers, body)
        assert status == 401, name
        assert reply["type"] == "Unauthorized" and reply["code"] == 401, name
    assert request(url, "GET", "/health", [])[0] == 200  # open: the launchers poll it


# ---------------------------------------------------------------------------------------------
# The vLLM middleware under uvicorn
# ---------------------------------------------------------------------------------------------


async def echo_app(scope, receive, send):
    """The server behind the middleware: 200 and the path it was asked."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    body = json.dumps({"served": scope["path"]}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def asgi_server(monkeypatch) -> Iterator[str]:
    """The middleware around an app under uvicorn on 127.0.0.1, the token in the server's
    environment as a job hands it (vLLM builds the middleware with `app.add_middleware`)."""
    uvicorn = pytest.importorskip("uvicorn")
    monkeypatch.setenv(auth.TOKEN_ENV, JOB_TOKEN)
    config = uvicorn.Config(auth.TokenAuth(echo_app), host="127.0.0.1", port=0, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_the_vllm_middleware_refuses_every_request_without_the_jobs_token(asgi_server):
    assert_refuses_every_attack(asgi_server)
    headers = [("Authorization", f"Bearer {JOB_TOKEN}")]
    assert request(asgi_server, "POST", "/classify", headers) == (200, {"served": "/classify"})
    assert request(asgi_server, "GET", "/v1/models", headers) == (200, {"served": "/v1/models"})


def test_the_vllm_middleware_proves_it_holds_the_token(asgi_server):
    nonce = "ab" * 16
    status, reply = request(asgi_server, "GET", f"{auth.PROOF_PATH}?nonce={nonce}", [])
    assert (status, reply) == (200, {"proof": auth.proof(JOB_TOKEN, nonce)})
    assert reply["proof"] != auth.proof(OTHER_JOB_TOKEN, nonce)
    for query in ("", "?nonce=xyz", f"?nonce={nonce}&nonce={nonce}", f"?nonce={'a' * 200}"):
        assert request(asgi_server, "GET", f"{auth.PROOF_PATH}{query}", [])[0] == 400, query
    auth.prove_server(asgi_server, JOB_TOKEN, timeout_s=30)  # the client's side
    assert auth.proven(asgi_server, JOB_TOKEN)
    with pytest.raises(auth.UnprovenServerError, match="did not prove it holds"):
        auth.prove_server(asgi_server, OTHER_JOB_TOKEN, timeout_s=30)


def test_the_vllm_middleware_without_a_token_stops_the_server_at_start(monkeypatch, tmp_path):
    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    monkeypatch.delenv(auth.TOKEN_FILE_ENV, raising=False)
    with pytest.raises(auth.TokenError, match="no token: set DARLING_JUDGE_TOKEN"):
        auth.TokenAuth(echo_app)
    # a token file: read when only the user can read it
    token_file = auth.write_token_file(tmp_path / "judge_token", JOB_TOKEN)
    assert os.stat(token_file).st_mode & 0o777 == 0o600
    monkeypatch.setenv(auth.TOKEN_FILE_ENV, str(token_file))
    assert auth.BearerTokenAuth is auth.TokenAuth  # vLLM's name for it, with a token
    assert auth.TokenAuth(echo_app).token == JOB_TOKEN
    token_file.chmod(0o644)
    with pytest.raises(auth.TokenError, match=r"others can read it \(mode 644\); chmod 600"):
        auth.TokenAuth(echo_app)


# ---------------------------------------------------------------------------------------------
# classify_server with the same flag, the served judge and a run against it
# ---------------------------------------------------------------------------------------------


def start_classify_server(model: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "darling_nemo.classify_server", "serve", model, "--port", "0",
         "--served-model-name", "similarity_gpu_0", "--middleware", auth.MIDDLEWARE],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny"), "bert"))


@pytest.fixture(scope="module")
def token_server(model_dir) -> Iterator[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", auth.TOKEN_ENV: JOB_TOKEN}
    env.pop(auth.TOKEN_FILE_ENV, None)
    proc = start_classify_server(model_dir, env)
    try:
        yield wait_ready(proc, timeout_s=180)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def served_judge(url: str):
    config = {"kind": "served", "endpoints": [{"url": url, "model": "similarity_gpu_0"}]}
    return validate_darling({"judge": config}).judge


@pytest.mark.usefixtures("offline")
def test_classify_server_refuses_every_request_without_the_jobs_token(token_server):
    assert_refuses_every_attack(token_server)
    nonce = "cd" * 32
    status, reply = request(token_server, "GET", f"{auth.PROOF_PATH}?nonce={nonce}", [])
    assert (status, reply) == (200, {"proof": auth.proof(JOB_TOKEN, nonce)})
    assert request(token_server, "GET", f"{auth.PROOF_PATH}?nonce=no", [])[0] == 400


@pytest.mark.usefixtures("offline")
def test_the_served_judge_sends_the_token_and_gets_todays_verdicts(
    token_server, model_dir, monkeypatch
):
    monkeypatch.setenv(auth.TOKEN_ENV, JOB_TOKEN)
    rng = np.random.default_rng(3)
    pairs = [(" ".join(rng.choice(WORDS, 8)), " ".join(rng.choice(WORDS, 8))) for _ in range(12)]
    reference = make_judge(
        validate_darling({"judge": {"kind": "cross_encoder", "model": model_dir}}).judge
    )
    probe_served_judge(served_judge(token_server), timeout_s=60)
    with make_judge(served_judge(token_server)) as judge:
        np.testing.assert_allclose(judge(pairs), reference(pairs), atol=1e-5)


@pytest.mark.usefixtures("offline")
def test_a_judge_holding_another_jobs_token_refuses_to_start(token_server, monkeypatch):
    refusal = (  # it cannot prove it holds this job's token: the token is never sent
        f"the judge server at {token_server} did not prove it holds this job's token (GET "
        "/darling/proof answered no proof, or a wrong one); the token was not sent: is another "
        "program on that port, a server of another job, or one started without the token?"
    )
    monkeypatch.setenv(auth.TOKEN_ENV, OTHER_JOB_TOKEN)
    with pytest.raises(ServedJudgeError) as probed:
        probe_served_judge(served_judge(token_server), timeout_s=60)
    assert str(probed.value) == refusal  # one line, nothing else
    with make_judge(served_judge(token_server)) as judge, pytest.raises(ServedJudgeError) as call:
        judge([("a b c", "a b d")])
    assert str(call.value) == f"served judge: {refusal}"
    # the run itself: one line and exit 2, before any model loads
    env = {**os.environ, auth.TOKEN_ENV: OTHER_JOB_TOKEN}
    endpoints = f"darling.judge={{kind: served, endpoints: [{token_server}]}}"
    run = subprocess.run(
        [sys.executable, "recipes/darling_math.py", "--config", "conf/local/math_trl.yaml",
         endpoints, f"output_dir={Path(os.environ.get('TMPDIR', '/tmp')) / 'never-written'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == f"darling_math: conf/local/math_trl.yaml: {refusal}"
    assert OTHER_JOB_TOKEN not in run.stdout + run.stderr


def test_classify_server_with_the_middleware_and_no_token_does_not_start(
    model_dir, monkeypatch, capsys
):
    from darling_nemo.classify_server import main

    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    monkeypatch.delenv(auth.TOKEN_FILE_ENV, raising=False)
    assert main(["serve", model_dir, "--middleware", auth.MIDDLEWARE]) == 2
    assert capsys.readouterr().err.strip() == (
        "classify_server: no token: set DARLING_JUDGE_TOKEN (or DARLING_JUDGE_TOKEN_FILE, a "
        "file of mode 0600) in the server's environment; the servers accept no request "
        "without it"
    )
    assert main(["serve", model_dir, "--middleware", "some.other.Middleware"]) == 2
    assert "only darling_nemo.judges.auth.BearerTokenAuth" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# What counts as a secret
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, secret",
    [
        ("WANDB_API_KEY", True),
        ("HF_TOKEN", True),
        ("DARLING_JUDGE_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("OPENAI_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("DB_PASSWORD", True),
        ("DARLING_JUDGE_TOKEN_FILE", False),  # a path
        ("TOKENIZERS_PARALLELISM", False),
        ("HF_HOME", False),
        ("PATH", False),
        ("MONKEY", False),
    ],
)
def test_secret_names(name, secret):
    assert auth.is_secret_name(name) is secret


def test_darling_serve_classifiers_without_a_token_makes_one_in_a_private_file(monkeypatch):
    from darling_nemo.serve_classifiers import server_token

    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    monkeypatch.delenv(auth.TOKEN_FILE_ENV, raising=False)
    token, path = server_token()
    try:
        assert path is not None and len(token) >= 40
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
        monkeypatch.setenv(auth.TOKEN_FILE_ENV, str(path))  # what it tells the clients
        assert auth.job_token() == token
    finally:
        path.unlink()
        path.parent.rmdir()
    monkeypatch.setenv(auth.TOKEN_ENV, "the-jobs-own-token")  # a cluster job's: no file
    assert server_token() == ("the-jobs-own-token", None)
