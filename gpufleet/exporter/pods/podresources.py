"""The kubelet's view of GPU allocations, refreshed in the background.

Calls pod-resources v1 `List` on the kubelet socket every few seconds (gRPC over HTTP/2 by
`grpcunary`, one connection per call: grpcio is never loaded), reads the device manager's
checkpoint (for pod UIDs), and publishes an immutable `KubeletView` by swapping one
reference, so the collector reads it without a lock.

Rules: never called per scrape or per collection (dcgm-exporter's per-scrape `List` is the
root of its CPU and latency complaints); never calls `Get` (gated off on many kubelets);
never raises into the collector. On failure the last good view is served for at most
`max_stale_seconds`, then an empty one (series without pod labels): a stale allocation is
worse than none once pods may have moved. Failures are counted by kind and logged once per
change of state, not once per attempt.
"""

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from gpufleet.exporter.pods.grpcunary import UnaryClient
from gpufleet.exporter.pods.grpcwire import CallError, StatusCode
from gpufleet.exporter.pods.listwire import Listed, decode_list
from gpufleet.exporter.pods.view import EMPTY_VIEW, KubeletView
from gpufleet.kubelet.checkpoint import CheckpointEntry, CheckpointRead, read_checkpoint
from gpufleet.logs import ThrottledLog

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_CHECKPOINT = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
# What kubelet clients use; a node with many pods exceeds gRPC's 4 MiB default.
MAX_RECEIVE_BYTES = 16 << 20


class KubeletErrorKind(StrEnum):
    """The `kind` label of gpufleet_exporter_kubelet_errors_total."""

    SOCKET_MISSING = "socket_missing"  # no kubelet.sock (not mounted, kubelet restarting)
    UNAVAILABLE = "unavailable"  # connection refused or dropped
    RATE_LIMITED = "rate_limited"  # RESOURCE_EXHAUSTED: the kubelet's token bucket
    DEADLINE = "deadline"  # List took longer than the call timeout
    # checkpoint unreadable or malformed (no pod UIDs), or one per malformed entry skipped
    CHECKPOINT = "checkpoint"
    ERROR = "error"  # anything else


_KIND_BY_CODE = {
    StatusCode.UNAVAILABLE: KubeletErrorKind.UNAVAILABLE,
    StatusCode.RESOURCE_EXHAUSTED: KubeletErrorKind.RATE_LIMITED,
    StatusCode.DEADLINE_EXCEEDED: KubeletErrorKind.DEADLINE,
}


# The kubelet's method; its request is empty and its response is decoded by `listwire`,
# so the exporter never loads the protobuf runtime (1.2 MiB, BENCHMARKS.md issue 15).
LIST_METHOD = "/v1.PodResourcesLister/List"
_EMPTY_REQUEST = b""  # ListPodResourcesRequest has no fields
_NO_PODS: Listed = ((), ())


# The kubelet's bucket (`grpc/ratelimit.go`: x/time/rate's Allow, 100/s, burst 10) is
# shared by every client of the socket, and a refused call takes no token from it.
RATE_LIMITED_RETRY_SECONDS = 1.0


def next_wait_seconds(failure: KubeletErrorKind | None, *, refresh: float) -> float:
    """Seconds until the next List: the refresh interval; after a rate-limited try, one
    second. Backing off would not spare the kubelet's tokens (a refused call spends none)
    and would only outlive the last view: two doublings from 5 s left the series without
    pod labels for 20 s while the kubelet took every call."""
    if failure is KubeletErrorKind.RATE_LIMITED:
        return min(refresh, RATE_LIMITED_RETRY_SECONDS)
    return refresh


class PodResourcesWatcher:
    """Keeps a `KubeletView` fresh from a background thread.

    `view()` is lock-free and never blocks; `refresh_now()` refreshes in the caller's
    thread (tests, start-up). Thread-safe.
    """

    def __init__(
        self,
        *,
        socket_path: Path = DEFAULT_SOCKET,
        checkpoint_path: Path = DEFAULT_CHECKPOINT,
        refresh_seconds: float = 5.0,
        max_stale_seconds: float | None = None,
        call_timeout_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`max_stale_seconds` defaults to 3 refreshes; clocks are injectable for tests."""
        self._socket_path = socket_path
        self._checkpoint_path = checkpoint_path
        self._refresh_seconds = refresh_seconds
        self._max_stale_seconds = (
            3 * refresh_seconds if max_stale_seconds is None else max_stale_seconds
        )
        self._call_timeout_seconds = call_timeout_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._view = EMPTY_VIEW
        self._last_success_at: float | None = None
        self._errors = dict.fromkeys(KubeletErrorKind, 0)
        self._errors_lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._client = UnaryClient(socket_path.absolute(), max_receive_bytes=MAX_RECEIVE_BYTES)
        self._state = "starting"  # "ok" or a failure kind: what was last logged
        self._checkpoint_state: KubeletErrorKind | None = None
        self._bugs = ThrottledLog(log, clock=clock)
        self._checkpoint_skipped: tuple[str, ...] = ()  # what was last logged
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the collector and the self-metrics read --------------------------------------

    def view(self) -> KubeletView:
        """The latest view, or EMPTY_VIEW once it is older than `max_stale_seconds`."""
        view = self._view
        refreshed = view.refreshed_monotonic
        if refreshed is not None and self._clock() - refreshed > self._max_stale_seconds:
            return EMPTY_VIEW
        return view

    def errors(self) -> dict[str, int]:
        """Failures so far by kind (every kind present, from 0)."""
        with self._errors_lock:
            return {str(kind): count for kind, count in self._errors.items()}

    @property
    def last_success_at(self) -> float | None:
        """Wall-clock seconds of the last successful List, or None."""
        return self._last_success_at

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread; its first refresh happens at once."""
        if self._thread is not None:
            raise RuntimeError("PodResourcesWatcher already started")
        self._thread = threading.Thread(target=self._run, name="podresources", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop the thread; an in-flight List is cancelled, so this returns promptly."""
        self._stopping.set()
        self._client.close()  # cancels a List in flight
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def refresh_now(self) -> KubeletView:
        """Refresh in the caller's thread and return the resulting view. Never raises."""
        with self._refresh_lock:
            self._refresh_locked()
        return self.view()

    def _run(self) -> None:
        wait = 0.0
        while not self._stopping.wait(wait):
            with self._refresh_lock:
                try:
                    failure = self._refresh_locked()
                except Exception:  # a bug of ours: the thread must live, or pods freeze
                    self._count(KubeletErrorKind.ERROR)
                    self._bugs.log(logging.ERROR, "pod-resources refresh failed", exc_info=True)
                    failure = KubeletErrorKind.ERROR
            wait = next_wait_seconds(failure, refresh=self._refresh_seconds)

    # -- one refresh -----------------------------------------------------------------------

    def _refresh_locked(self) -> KubeletErrorKind | None:
        """List, read the checkpoint, publish. Returns the List failure kind, if any."""
        if self._stopping.is_set():
            return None
        (containers, claims), failure, detail = self._list()
        if self._stopping.is_set():
            return None  # a List cancelled by stop() is not a kubelet failure
        if failure is not None:
            self._count(failure)
            self._on_failure(failure, detail)
            return failure
        checkpoint = self._read_checkpoint(holding=bool(containers))
        self._last_success_at = self._wall_clock()
        self._view = KubeletView(
            containers=containers,
            checkpoint=checkpoint,
            claims=claims,
            refreshed_at=self._last_success_at,
            refreshed_monotonic=self._clock(),
        )
        if self._state != "ok":
            log.info(
                "pod-resources List ok",
                extra={"fields": {"socket": str(self._socket_path), "after": self._state}},
            )
            self._state = "ok"
        return None

    def _list(self) -> tuple[Listed, KubeletErrorKind | None, str]:
        if not self._socket_path.exists():
            return _NO_PODS, KubeletErrorKind.SOCKET_MISSING, "socket not found"
        try:
            response = self._client.call(
                LIST_METHOD, _EMPTY_REQUEST, timeout_seconds=self._call_timeout_seconds
            )
            return decode_list(response), None, ""
        except CallError as exc:
            return _NO_PODS, _KIND_BY_CODE.get(exc.code, KubeletErrorKind.ERROR), str(exc)
        except Exception as exc:  # never into the collector: counted as "error"
            return _NO_PODS, KubeletErrorKind.ERROR, repr(exc)

    def _read_checkpoint(self, *, holding: bool) -> tuple[CheckpointEntry, ...]:
        """The checkpoint entries; none (no pod UIDs, so no per-pod split) if unreadable.

        A malformed entry costs only its own pod's UID: it is skipped and counted. A file
        missing while pods hold devices (`holding`) is counted too: the kubelet writes it
        before any allocation, so its directory is not mounted (dcgm-exporter's chart
        mounts only pod-resources), and pods sharing a GPU go without split values.
        """
        try:
            read, failure, detail = read_checkpoint(self._checkpoint_path), None, ""
        except (OSError, ValueError) as exc:
            read, failure, detail = CheckpointRead(), KubeletErrorKind.CHECKPOINT, str(exc)
        if failure is None and holding and not self._checkpoint_path.exists():
            failure = KubeletErrorKind.CHECKPOINT
            detail = (
                f"{self._checkpoint_path} not found while pods hold devices: mount "
                "/var/lib/kubelet/device-plugins read-only for pod UIDs"
            )
        if failure is not None:
            self._count(failure)
        if failure != self._checkpoint_state:
            if failure is None:
                log.info("kubelet checkpoint readable again", extra={"fields": {}})
            else:
                log.warning("kubelet checkpoint unreadable", extra={"fields": {"error": detail}})
            self._checkpoint_state = failure
        if read.skipped:
            self._count(KubeletErrorKind.CHECKPOINT, len(read.skipped))
        if read.skipped != self._checkpoint_skipped and read.skipped:
            log.warning(
                "kubelet checkpoint entries skipped",
                extra={"fields": {"skipped": len(read.skipped), "first": read.skipped[0]}},
            )
        self._checkpoint_skipped = read.skipped
        return read.entries

    def _on_failure(self, kind: KubeletErrorKind, detail: str) -> None:
        """Drop a view past its staleness limit; log only changes of state."""
        refreshed = self._view.refreshed_monotonic
        dropped = refreshed is not None and self._clock() - refreshed > self._max_stale_seconds
        if dropped:
            self._view = EMPTY_VIEW
            log.warning(
                "kubelet view dropped: no successful List within the staleness limit",
                extra={"fields": {"max_stale_seconds": self._max_stale_seconds, "kind": kind}},
            )
        if self._state != kind:
            log.warning(
                "pod-resources List failing; keeping the last view until it is stale",
                extra={"fields": {"kind": kind, "error": detail, "socket": str(self._socket_path)}},
            )
            self._state = kind

    def _count(self, kind: KubeletErrorKind, n: int = 1) -> None:
        with self._errors_lock:
            self._errors[kind] += n
