"""classify_server's guard against being starved by connections that never send a request.

aiohttp (3.14) waits forever for the headers of a connection's first request, so a few
thousand connections that send half a request line and stop keep a file descriptor each
until the process hits its `ulimit -n`, and then it accepts nobody, the job's own driver
included. Two limits stop that:

- HEADER_TIMEOUT_S: a connection whose first request's headers are not complete this long
  after it connected is closed (later requests on a kept-alive connection are aiohttp's
  keep-alive timeout's business);
- MAX_UNAUTHENTICATED: connections that have not yet sent a request past the token check
  (judges/auth.py) are at most this many; a new one beyond it closes the oldest. The job's
  clients are authenticated after their first request and never counted again, and a
  fresh one is the newest, so an attacker would have to open this many connections in the
  milliseconds its headers take to push it out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web, web_protocol

HEADER_TIMEOUT_S = 5.0
MAX_UNAUTHENTICATED = 256  # far below the 1024 of a default `ulimit -n`


class ConnectionGuard:
    """The connections not yet authenticated, oldest first."""

    def __init__(self, max_unauthenticated: int = MAX_UNAUTHENTICATED) -> None:
        self.max_unauthenticated = max_unauthenticated
        self.waiting: dict[GuardedHandler, None] = {}  # a dict: ordered, O(1) removal

    def opened(self, handler: GuardedHandler) -> None:
        self.waiting[handler] = None
        while len(self.waiting) > self.max_unauthenticated:
            oldest = next(iter(self.waiting))
            self.forget(oldest)
            oldest.force_close()

    def forget(self, handler: GuardedHandler) -> None:
        self.waiting.pop(handler, None)


class GuardedHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler with a deadline for the first request's headers."""

    def __init__(self, guard: ConnectionGuard, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = guard
        self.header_timeout_s = header_timeout_s
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        loop = asyncio.get_running_loop()
        self.header_timer = loop.call_later(self.header_timeout_s, self._headers_too_late)
        self.guard.opened(self)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # aiohttp counts a request once its headers are parsed (its own attribute)
        if self.header_timer is not None and self._request_count > 0:
            self.header_timer.cancel()
            self.header_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        self.guard.forget(self)
        super().connection_lost(exc)

    def _headers_too_late(self) -> None:
        self.header_timer = None
        if self._request_count == 0:
            self.force_close()


def authenticated(request: web.Request) -> None:
    """The request passed the token check: its connection is the job's, never evicted."""
    handler = request.protocol
    if isinstance(handler, GuardedHandler):
        handler.guard.forget(handler)


async def start_guarded(
    runner: web.AppRunner,
    host: str,
    port: int,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_unauthenticated: int = MAX_UNAUTHENTICATED,
) -> asyncio.Server:
    """Listen on host:port with the runner's app behind the guard (instead of a TCPSite);
    the caller closes the returned server before `runner.cleanup()`."""
    assert runner.server is not None, "runner.setup() first"
    guard = ConnectionGuard(max_unauthenticated)
    loop = asyncio.get_running_loop()

    def handler() -> GuardedHandler:
        return GuardedHandler(guard, header_timeout_s, manager=runner.server, loop=loop)

    return await loop.create_server(handler, host, port, backlog=128, reuse_address=True)
