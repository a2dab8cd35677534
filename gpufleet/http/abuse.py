"""What clients, and the OS under their load, can make the HTTP server log: bounded.

An HTTP server that logs each request it cannot parse at ERROR with a traceback (aiohttp's
did, before any authentication), and asyncio's logging of each failed accept() with one,
let anyone who can connect flood the log (5,000 malformed requests gave 2.9 MB; running
out of file descriptors gave 16,255 tracebacks in 10 s, as CPython retries every pending
accept). Here each is counted in `ServerStats` (served as self-metrics) and logged as one
line, rate-limited: a burst of lines, then one per interval saying how many were held back.
A client's bad request never logs a traceback; an error in our own handler still does,
rate-limited too.
"""

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from typing import Any

from gpufleet.core.messages import cut
from gpufleet.core.server_stats import ServerStats
from gpufleet.http.wire import BadRequest
from gpufleet.logs import ThrottledLog

log = logging.getLogger(__name__)

_MAX_REASON_CHARS = 200  # the reason quotes client bytes: bounded, on one line
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class RequestErrorLog:
    """The server's log of requests that failed: a request refused because it did not
    parse is counted and logged as one line, a bug in a handler with its traceback; both
    rate-limited."""

    def __init__(self, stats: ServerStats, *, clock: Callable[[], float] = time.monotonic):
        self._stats = stats
        self._bad_requests = ThrottledLog(log, clock=clock)
        self._handler_errors = ThrottledLog(log, clock=clock)

    def bad_request(self, peer: str, exc: BadRequest) -> None:
        self._stats.bad_requests_total += 1
        reason = cut(" ".join(exc.reason.split()), _MAX_REASON_CHARS)  # client bytes: bounded
        self._bad_requests.log(
            logging.WARNING, "bad request from %s: refused with %d: %s", peer, exc.status, reason
        )

    def handler_error(self, method: str, path: str) -> None:
        """Call from the `except` block: the traceback is the one being handled."""
        self._handler_errors.log(
            logging.ERROR, "error handling %s %s", method, path[:_MAX_REASON_CHARS], exc_info=True
        )

    def connection_error(self, peer: str) -> None:
        """Call from the `except` block of a connection's task that failed outside a
        handler."""
        self._handler_errors.log(
            logging.ERROR, "error serving the connection from %s", peer, exc_info=True
        )


class AcceptErrorHandler:
    """The event loop's exception handler from the server's start: a failed accept() for
    want of file descriptors or memory is counted and logged as one rate-limited line;
    anything else goes to the previous handler.

    asyncio schedules a retry one second later for every failed accept, hundreds per
    second while descriptors run out; those still pending when the server closes fail on
    the closed socket. That is the same episode's tail, not news: logged at debug, which
    is why this handler stays installed after `close()`.
    """

    def __init__(
        self,
        stats: ServerStats,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stats = stats
        self._previous = previous
        self._log = ThrottledLog(log, clock=clock)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            str(context.get("message", "")).startswith("socket.accept()")
            and isinstance(exc, OSError)
            and exc.errno in _OUT_OF_RESOURCES
        ):
            self._stats.accept_errors_total += 1
            self._log.log(
                logging.WARNING,
                "cannot accept connections: %s; retrying",
                exc.strerror or errno.errorcode.get(exc.errno or 0, "?"),
            )
        elif "._start_serving(" in str(context.get("message", "")) and isinstance(exc, ValueError):
            log.debug("an accept retry found its listening socket closed")
        elif self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)
