"""The token middleware in vLLM 0.10.0's own OpenAI server app: `build_app` from its
command line (`--middleware darling_nemo.judges.auth.BearerTokenAuth`, resolved with
`getattr(importlib.import_module(path), name)`, then `app.add_middleware`), served by uvicorn
as its `serve_http` serves it, in a real process with no engine behind it (the middleware
answers before any route). Starlette builds the middleware only at the first event
(lifespan); before judges/auth.py resolved the name itself, a server without its token
logged the error and answered 500 to everything. Needs vLLM 0.10.0 beside NeMo-RL's CPU
environment (containers/vllm_contract_env.sh): skipped elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

from helpers import REPO  # noqa: E402

from darling_nemo.judges import auth  # noqa: E402
from darling_nemo.rehearsal import contract_vllm  # noqa: E402

TOKEN = auth.new_token()
SITE, WHY_NOT = contract_vllm.sources()
VLLM_APP = """
import asyncio, sys
import uvicorn
from darling_nemo.rehearsal.contract_vllm import gpu_stand_ins
gpu_stand_ins()  # vLLM's argument defaults ask the platform for a device
from vllm.entrypoints.openai.api_server import build_app
from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.utils import FlexibleArgumentParser

args = make_arg_parser(FlexibleArgumentParser()).parse_args(
    ["--task", "classify", "--middleware", sys.argv[1]]
)
app = build_app(args)
app.state.log_stats = False  # init_app_state sets it from the engine: there is none here
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
    if SITE is None:
        pytest.skip(WHY_NOT)
    env = {**env, "PYTHONPATH": os.pathsep.join([*SITE, str(REPO)])}
    return subprocess.Popen(
        [sys.executable, "-c", VLLM_APP, auth.MIDDLEWARE],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_vllm_app_without_its_token_exits_with_one_line_instead_of_serving_500s():
    env = {k: v for k, v in os.environ.items() if k not in (auth.TOKEN_ENV, auth.TOKEN_FILE_ENV)}
    proc = start(env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "READY" not in out
    assert [line for line in err.strip().splitlines() if not line.startswith("INFO")][-1:] == [
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
        assert json.loads(refused.value.read())["type"] == "Unauthorized"
        # /version: a vLLM route that needs no engine, refused without the token, served with it
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/version", timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(f"{url}/version", headers=auth.bearer_header(TOKEN))
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert json.loads(reply.read()) == {"version": "0.10.0"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
