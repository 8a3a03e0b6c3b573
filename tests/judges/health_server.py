"""A stand-in for `vllm serve` in the node-server tests: a real HTTP server on 127.0.0.1.

    python tests/judges/health_server.py serve MODE --task classify --host H --port P ...

MODE ok: GET /health answers 200; never: it answers 503 forever; exit: exits with status 3
before listening. With --middleware and a token, GET /darling/proof answers the token's proof
as vLLM's middleware does (judges/auth.py), so the launcher's wait trusts it. Writes its pid and CUDA_VISIBLE_DEVICES (or "-") to $HEALTH_SERVER_RECORD,
and its command line and DARLING_JUDGE_TOKEN (the job's token, "-" if none) to that path +
".token".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from darling_nemo.judges import auth


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["serve"])
    p.add_argument("mode", choices=["ok", "never", "exit"])
    p.add_argument("--task", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--gpu-memory-utilization", type=float, required=True)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--middleware", action="append", default=[])
    args = p.parse_args()
    record = os.environ.get("HEALTH_SERVER_RECORD")
    if record:
        Path(record).write_text(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')}")
        token = os.environ.get("DARLING_JUDGE_TOKEN", "-")
        Path(record + ".token").write_text(" ".join(sys.argv) + "\n" + token)
    if args.mode == "exit":
        print("health_server: asked to fail at start", flush=True)
        return 3
    status = 200 if args.mode == "ok" else 503

    token = auth.job_token() if args.middleware else None

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == auth.PROOF_PATH and token is not None:
                code, body = auth.proof_reply(query, token)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(status if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    print(f"health_server: {args.mode} on {args.host}:{args.port}", flush=True)
    ThreadingHTTPServer((args.host, args.port), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
