"""A stand-in creative-writing judge: an OpenAI-compatible `/v1/chat/completions` on this
machine that answers the rubric and pairwise prompts in their format, with meaningless
scores. With the tiny models it runs the creative evaluation end to end on CPU (its
plumbing: the client, retries, parsing, records, the summary), as conf/eval/creative_tiny.yaml
shows; a real judge is a served LLM (vLLM, an API) on the same URL.

    uv run python -m darling_nemo.evals.stand_in_judge --port 8001

Scores are a hash of (criterion, piece) in 0..10: deterministic, so a rerun judges the same;
in a pairwise prompt the longer piece wins every criterion. The criteria are read from the
prompt's closing `Criteria:` list (the shipped templates end with it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from darling_nemo.config import command_parser


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[-1].split(end, 1)[0].strip()


def reply_to(prompt: str) -> str:
    """The stand-in's answer to one rubric or pairwise prompt."""
    criteria = [c.strip() for c in prompt.rsplit("Criteria:", 1)[-1].splitlines() if c.strip()]
    if "[WRITER A]" in prompt:
        a = _between(prompt, "[WRITER A]", "[END WRITER A]")
        b = _between(prompt, "[WRITER B]", "[END WRITER B]")
        who = "A" if len(a) >= len(b) else "B"
        return "Stand-in verdicts.\n[Verdicts]\n" + "\n".join(f"{c}: {who}+++" for c in criteria)
    piece = _between(prompt, "[PIECE]", "[END PIECE]")

    def score(criterion: str) -> int:
        return hashlib.sha256(f"{criterion}\n{piece}".encode()).digest()[0] % 11

    return "Stand-in scores.\n[Scores]\n" + "\n".join(f"{c}: {score(c)}" for c in criteria)


class StandInJudge(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
            prompt = body["messages"][-1]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            self._send(400, {"error": {"message": f"bad request: {err}"}})
            return
        message = {"role": "assistant", "content": reply_to(prompt)}
        self._send(200, {"choices": [{"index": 0, "message": message}]})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:  # one line per request is noise here
        pass


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """The server, bound (port 0: a free one, see `server_address`), not yet serving."""
    return ThreadingHTTPServer((host, port), StandInJudge)


def main(argv: list[str] | None = None) -> int:
    parser: argparse.ArgumentParser = command_parser(__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    server = serve(args.host, args.port)
    print(f"stand-in judge on http://{args.host}:{server.server_address[1]}/v1", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it is stopped
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
