"""What clients, and the OS under their load, can make the HTTP server log: bounded.

aiohttp logs each request it cannot parse at ERROR with a traceback, before any
authentication, and asyncio logs each failed accept() with one; so anyone who can connect
could flood the log (5,000 malformed requests gave 2.9 MB; running out of file descriptors
gave 16,255 tracebacks in 10 s, as CPython retries every pending accept). Here each is
counted in `ServerStats` (served as self-metrics) and logged as one line, rate-limited: a
burst of lines, then one per interval saying how many were held back. A client's bad
request never logs a traceback; an error in our own handler still does, rate-limited too.
"""

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

from gpufleet.core.ratelimit import TokenBucket
from gpufleet.core.server_stats import ServerStats

log = logging.getLogger(__name__)

LOG_BURST = 5  # lines logged at once before the limit starts
LOG_EVERY_SECONDS = 10.0  # then one line per this many seconds, at most
_MAX_REASON_CHARS = 200  # the reason quotes client bytes: bounded, on one line
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ThrottledLog:
    """One kind of log line, rate-limited: `LOG_BURST` lines, then one per
    `LOG_EVERY_SECONDS`; the next line logged says how many were held back meanwhile."""

    def __init__(self, logger: logging.Logger, *, clock: Callable[[], float]) -> None:
        self._logger = logger
        self._bucket = TokenBucket(
            rate_per_second=1.0 / LOG_EVERY_SECONDS, burst=LOG_BURST, clock=clock
        )
        self._held_back = 0

    def log(self, level: int, msg: str, *args: object, exc_info: Any = None) -> None:
        if not self._bucket.take():
            self._held_back += 1
            return
        if self._held_back:
            msg, args = f"{msg} (and %d more held back)", (*args, self._held_back)
            self._held_back = 0
        self._logger.log(level, msg, *args, exc_info=exc_info)


def _reason(exc: HttpProcessingError) -> str:
    text = " ".join(str(exc.message).split()).rstrip(" ^")  # aiohttp's caret under the bytes
    return text if len(text) <= _MAX_REASON_CHARS else text[: _MAX_REASON_CHARS - 3] + "..."


class RequestErrorLog:
    """Stands in for aiohttp's server logger (`RequestHandler(logger=...)`), which it calls
    with `exception()` for a request that failed and `debug()` for the rest."""

    def __init__(self, stats: ServerStats, *, clock: Callable[[], float] = time.monotonic):
        self._stats = stats
        self._bad_requests = ThrottledLog(log, clock=clock)
        self._handler_errors = ThrottledLog(log, clock=clock)

    def exception(self, msg: str, *args: object, exc_info: Any = None, **_: Any) -> None:
        if self._bad_request(msg, args, exc_info):
            return
        self._handler_errors.log(logging.ERROR, msg, *args, exc_info=exc_info or True)

    def debug(self, msg: str, *args: object, exc_info: Any = None, **kw: Any) -> None:
        # aiohttp logs a non-HTTP first request (TLS or junk on the port) at debug.
        if not self._bad_request(msg, args, exc_info):
            log.debug(msg, *args, exc_info=exc_info, **kw)

    def __getattr__(self, name: str) -> Any:  # any other level aiohttp may use
        return getattr(log, name)

    def _bad_request(self, msg: str, args: tuple[object, ...], exc: Any) -> bool:
        """Count and log (one line, rate-limited) a request that did not parse."""
        if not isinstance(exc, HttpProcessingError):
            return False
        self._stats.bad_requests_total += 1
        self._bad_requests.log(
            logging.WARNING, "%s: refused with %d: %s", msg % args, exc.code, _reason(exc)
        )
        return True


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
