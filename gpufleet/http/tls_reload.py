"""A server TLS context that follows its files: certificates rotate without a restart.

cert-manager renews a Secret's certificate before it expires, and the kubelet swaps the
mounted files (a new `..data` directory, so a new inode). A context built once at startup
served the old certificate until it expired and every handshake failed. Peers reload:
exporter-toolkit builds its TLS config per handshake (`GetConfigForClient`), and
k8s.io/apiserver watches its serving and client-CA files (`dynamiccertificates`).

Here each handshake asks (at most once per `CHECK_SECONDS`) whether any input changed:
a file's inode, size or modification time, or a value `state` returns (a CA read from the
API). If one did, `build` makes a new context and this and later handshakes use it (the
`sni_callback` swaps the connection's context; it runs with or without SNI). A build
that fails, such as a pair caught half rewritten, keeps the last good context and is
logged once per change of its inputs. `Watched` and `rebuilt` serve the same rule to a
server that is not `ssl`'s (gRPC's per-connection certificate fetcher).
"""

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0
T = TypeVar("T")

Fingerprint = tuple[object, ...]


def _fingerprint(files: tuple[str, ...], state: Callable[[], object]) -> Fingerprint:
    marks: list[object] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            marks.append(None)
        else:
            marks.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return (*marks, state())


class Watched:
    """Whether the inputs changed since the last look, looked at once per CHECK_SECONDS at
    most (a handshake's cost stays a clock read). Not thread-safe: callers hold a lock."""

    def __init__(
        self,
        files: Iterable[str | Path],
        *,
        state: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = tuple(str(f) for f in files)
        self._state = state
        self._clock = clock
        self._seen = _fingerprint(self.files, state)
        self._checked = clock()

    def changed(self) -> bool:
        now = self._clock()
        if now - self._checked < CHECK_SECONDS:
            return False
        self._checked = now
        seen = _fingerprint(self.files, self._state)
        if seen == self._seen:
            return False
        self._seen = seen
        return True


def rebuilt(watched: Watched, build: Callable[[], T]) -> T | None:
    """`build()` when the inputs changed and it succeeds; None otherwise. A failure (a pair
    caught half rewritten) is logged once per change: the caller keeps its last good one."""
    if not watched.changed():
        return None
    try:
        fresh = build()
    except Exception as err:  # any failure keeps the last good one
        log.warning("TLS files changed but do not load; serving the last good: %s", err)
        return None
    log.info("TLS certificate reloaded from %s", ", ".join(watched.files) or "its settings")
    return fresh


class ReloadingContext:
    """`context` is the server's SSLContext; handshakes get the newest good build."""

    def __init__(
        self,
        build: Callable[[], ssl.SSLContext],
        files: Iterable[str | Path],
        *,
        state: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Builds once now (its errors are the caller's: a bad file stops startup)."""
        self._build = build
        self._watched = Watched(files, state=state, clock=clock)
        self._lock = threading.Lock()  # handshakes may run on several threads
        self.context = build()
        self._current = self.context
        self.context.sni_callback = self._on_hello

    def current(self) -> ssl.SSLContext:
        """The context a handshake now gets, rebuilt first if an input changed."""
        with self._lock:
            self._current = rebuilt(self._watched, self._build) or self._current
            return self._current

    def _on_hello(self, conn: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx) -> None:
        current = self.current()
        if current is not self.context:
            conn.context = current
