"""Logging setup shared by the daemons: one line per event, as text or JSON.

Daemons log through stdlib `logging` with module loggers; structured context goes in
`extra={"fields": {...}}` and is rendered as key=value pairs (text) or object keys (json).
"""

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from gpufleet.core.messages import MAX_SHOWN_CHARS, cut
from gpufleet.core.ratelimit import TokenBucket


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = f"{stamp}Z {record.levelname:<7} {record.name}: {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            obj["error"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup_logging(*, debug: bool, json_format: bool) -> None:
    """Route all logs to stderr in the chosen format (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if json_format else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    # aiohttp's access log (the autoscaler's external metrics API, the lab's servers) would
    # add a line per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(MALFORMED_REQUESTS)


class _MalformedRequests(logging.Filter):
    """aiohttp logs each malformed request it answers 400 (a request line or header too
    long, bytes that are no HTTP) as an ERROR with its traceback: a client's mistake, about
    500 bytes a request. Such a record is dropped for a one-line warning of a ThrottledLog
    on the same logger. Recognised by class name, so the exporter, which serves no aiohttp,
    never imports it."""

    def __init__(self) -> None:
        super().__init__()
        self._said = ThrottledLog(logging.getLogger("aiohttp.server"), clock=time.monotonic)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not any(c.__name__ == "HttpProcessingError" for c in type(exc).__mro__):
            return True
        what = f"{type(exc).__name__}: {cut(str(exc), MAX_SHOWN_CHARS)}"
        self._said.log(logging.WARNING, "a malformed request answered 400: %s", what)
        return False


_CHANGES_BURST = 4  # an OutageLog's changes logged at once: fails, works, fails, works


class OutageLog:
    """A dependency that keeps failing, logged as its transitions rather than per attempt.

    One warning when it starts failing (and when the reason changes), then one every
    `remind_seconds` while it keeps failing, saying how many failures there were since; one
    line when it works again. A loop that retries every second thus logs a handful of lines
    a day for a dependency down all day, and its self-metrics count every failure.

    The changes (fails, another reason, works again) are themselves rate-limited: a
    dependency that fails every other attempt logged a line per attempt. Past a few, one
    change per `remind_seconds / 2` is logged; the next line says how many were not.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        remind_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._what = what
        self._remind_seconds = remind_seconds
        self._clock = clock
        self._key: str | None = None  # what fails now (None: it works)
        self._failures = 0  # since the last line logged
        self._total = 0  # since it started failing
        self._logged_at = -math.inf
        self._changes = TokenBucket(
            rate_per_second=2.0 / remind_seconds, burst=_CHANGES_BURST, clock=clock
        )
        self._unlogged = 0  # changes not logged since the last line

    @property
    def failures(self) -> int:
        """Failures since it started failing (0 while it works)."""
        return self._total

    def failed(
        self, reason: str, *, kind: str | None = None, exc_info: BaseException | None = None
    ) -> None:
        """One failure; `kind` (else the reason itself) tells a new reason from the same
        one said differently (an error's text may name a new object each time). With
        `exc_info`, a line it logs is an error with that traceback."""
        now = self._clock()
        self._failures += 1
        self._total += 1
        key = reason if kind is None else kind
        if key != self._key:
            if not self._changes.take():  # flapping: the reminder will say it
                self._key = key
                self._unlogged += 1
                return
            level = logging.WARNING if exc_info is None else logging.ERROR
            self._log(level, "%s: %s", self._what, reason, exc_info=exc_info)
        elif now - self._logged_at >= self._remind_seconds:
            self._log(
                logging.WARNING,
                "%s: %s (still, %d failures since the last line)",
                self._what,
                reason,
                self._failures,
            )
        else:
            return
        self._key, self._failures, self._logged_at = key, 0, now

    def raised(self, err: BaseException) -> None:
        """A failure that is an exception nothing expected (a bug, or data nothing
        checked): its traceback once an outage, for the bug report, then `failed` with its
        type and bounded text."""
        what = type(err).__name__
        first = None if self._total else err
        self.failed(f"{what}: {cut(str(err), MAX_SHOWN_CHARS)}", kind=what, exc_info=first)

    def recovered(self) -> None:
        if self._total:
            if self._changes.take():
                self._log(
                    logging.INFO, "%s: works again, after %d failures", self._what, self._total
                )
                self._logged_at = -math.inf
            else:
                self._unlogged += 1
        self._key, self._failures, self._total = None, 0, 0

    def _log(
        self, level: int, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> None:
        if self._unlogged:
            msg, args = f"{msg} (%d changes not logged before it)", (*args, self._unlogged)
            self._unlogged = 0
        self._logger.log(level, msg, *args, exc_info=exc_info)


LOG_BURST = 5  # lines a ThrottledLog logs at once before the limit starts
LOG_EVERY_SECONDS = 10.0  # then one line per this many seconds, at most


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


MALFORMED_REQUESTS = _MalformedRequests()
_OUT_OF_RESOURCES = "socket.accept() out of system resource"


def throttle_accept_errors(loop: Any) -> None:
    """Keep an asyncio loop's "cannot accept" errors to a few lines.

    With every file descriptor held (clients that connect and never send), asyncio logs
    `_OUT_OF_RESOURCES` with its traceback for each of up to a backlog of accepts a second,
    on each listener: the lab, listening on a port a pod, logged 52,263 lines in 8 s. Those
    become one-line errors, `LOG_BURST` and then one per `LOG_EVERY_SECONDS`; every other
    error of the loop goes to asyncio's own handler."""
    throttled = ThrottledLog(logging.getLogger("asyncio"), clock=time.monotonic)

    def handle(loop: Any, context: dict[str, Any]) -> None:
        if context.get("message") != _OUT_OF_RESOURCES:
            loop.default_exception_handler(context)
            return
        throttled.log(
            logging.ERROR,
            "cannot accept a connection: %s (every file descriptor in use?)",
            context.get("exception"),
        )

    loop.set_exception_handler(handle)
