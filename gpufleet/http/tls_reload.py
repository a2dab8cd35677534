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
logged once per change of its inputs. `Reloading` holds the rule for any built value, so
a server that is not `ssl`'s (gRPC's per-connection certificate fetcher) follows it too.
"""

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

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


class Reloading(Generic[T]):
    """`current` is what `build` made of the inputs (`files`, and `state()`), rebuilt by
    `refresh` once they change. Thread-safe."""

    def __init__(
        self,
        build: Callable[[], T],
        files: Iterable[str | Path],
        *,
        state: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Builds once now (its errors are the caller's: a bad file stops startup). The
        inputs are looked at first, so files swapped in meanwhile count as a change."""
        self._build = build
        self._files = tuple(str(f) for f in files)
        self._state = state
        self._clock = clock
        self._lock = threading.Lock()  # handshakes may run on several threads
        self._seen = _fingerprint(self._files, state)
        self._checked = clock()
        self.current = build()

    def refresh(self) -> T | None:
        """The new build when the inputs changed and it succeeded (it is `current` from
        then on); None otherwise. Looks at most once per CHECK_SECONDS, so a handshake's
        cost stays a clock read. A build that fails is logged once per change."""
        with self._lock:
            now = self._clock()
            if now - self._checked < CHECK_SECONDS:
                return None
            self._checked = now
            seen = _fingerprint(self._files, self._state)
            if seen == self._seen:
                return None
            self._seen = seen
            try:
                fresh = self._build()
            except Exception as err:  # any failure keeps the last good one
                log.warning("TLS files changed but do not load; serving the last good: %s", err)
                return None
            log.info("TLS certificate reloaded from %s", ", ".join(self._files) or "its settings")
            self.current = fresh
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
        self._reloading = Reloading(build, files, state=state, clock=clock)
        self.context = self._reloading.current
        self.context.sni_callback = self._on_hello

    def _on_hello(self, conn: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx) -> None:
        self._reloading.refresh()
        current = self._reloading.current
        if current is not self.context:
            conn.context = current
