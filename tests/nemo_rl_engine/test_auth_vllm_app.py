"""The token middleware in a FastAPI app under uvicorn, built as vLLM 0.10.0's `build_app`
builds it (`getattr(importlib.import_module(path), name)`, then `app.add_middleware`) and
served as its `serve_http` serves it (`uvicorn.Config(app)`, `config.load()`,
`Server.serve()`), in a real process. Starlette builds the middleware only at the first
event (lifespan); before judges/auth.py resolved the name itself, a server without its token
logged the error and answered 500 to everything. NeMo-RL's environment has vLLM's FastAPI,
Starlette and uvicorn (the dev environment has no Starlette): skipped elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytest.importorskip("nemo_rl")
pytest.importorskip("fastapi")
pytestmark = pytest.mark.nemo_rl

from helpers import REPO  # noqa: E402

from darling_nemo.judges import auth  # noqa: E402

TOKEN = auth.new_token()
# vLLM 0.10.0: vllm/entrypoints/openai/api_server.py build_app, vllm/entrypoints/launcher.py
VLLM_LIKE = """
import asyncio, importlib, inspect, sys
import uvicorn
from fastapi import FastAPI

app = FastAPI()

@app.get("/health")
async def health():
    return {}

@app.post("/classify")
async def classify():
    return {"data": []}

for middleware in sys.argv[1:]:
    module_path, object_name = middleware.rsplit(".", 1)
    imported = getattr(importlib.import_module(module_path), object_name)
    if inspect.isclass(imported):
        app.add_middleware(imported)
config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
config.load()
server = uvicorn.Server(config)

async def main():
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    print("READY", server.servers[0].sockets[0].getsockname()[1], flush=True)
    await task

asyncio.run(main())
"""


def start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", VLLM_LIKE, auth.MIDDLEWARE],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_vllm_app_without_its_token_exits_with_one_line_instead_of_serving_500s():
    env = {k: v for k, v in os.environ.items() if k not in (auth.TOKEN_ENV, auth.TOKEN_FILE_ENV)}
    proc = start(env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "READY" not in out
    assert err.strip().splitlines() == [
        f"{auth.MIDDLEWARE}: no token: set DARLING_JUDGE_TOKEN (or DARLING_JUDGE_TOKEN_FILE, a "
        "file of mode 0600) in the server's environment; the servers accept no request "
        "without it"
    ]


def test_a_vllm_app_with_its_token_proves_it_and_refuses_others():
    proc = start({**os.environ, auth.TOKEN_ENV: TOKEN})
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + proc.stderr.read()
        url = f"http://127.0.0.1:{line.split()[1]}"
        auth.prove_server(url, TOKEN, timeout_s=30)
        with pytest.raises(auth.UnprovenServerError):
            auth.prove_server(url, auth.new_token(), timeout_s=30)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{url}/classify", b"{}"), timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(f"{url}/classify", b"{}", auth.bearer_header(TOKEN))
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert json.loads(reply.read()) == {"data": []}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
