"""XID errors from NVML's critical-error events, kept per GPU by a background thread.

NVML has no polling API for XIDs: they arrive as events on an event set, which is what DCGM
itself listens to. One daemon thread waits on the set with a short timeout so `stop` is
prompt, and records each XID as the GPU's last value, per-XID count and, with the monotonic
time it was received, in a bounded recent history (`XidState.recent`, for the windowed
DCGM_EXP_XID_ERRORS_COUNT). The
thread must never die of an NVML error or a lost GPU: errors are counted and retried with
backoff. A GPU that cannot report XIDs is logged and skipped, never guessed at: only GPUs
whose registration succeeded appear in `snapshot`. One whose registration failed otherwise
than NotSupported (lost for a moment, an unknown error) is registered again by the thread,
with backoff, rather than left unwatched until the GPU set changes.
"""

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pynvml

from gpufleet.core.backoff import Backoff
from gpufleet.exporter.core.samples import Entity, XidState
from gpufleet.exporter.core.windows import HISTORY_MAX_ENTRIES
from gpufleet.logs import ThrottledLog
from gpufleet.nvml.values import handle_address, text

log = logging.getLogger(__name__)

_XID = pynvml.nvmlEventTypeXidCriticalError
_NO_XID = XidState(last=0, counts=MappingProxyType({}))


class XidWatcher:
    """Watches the XID events of a set of GPUs; `snapshot` gives the history so far."""

    def __init__(
        self,
        lib: Any,
        gpus: Iterable[Entity],
        *,
        wait_ms: int = 500,
        max_backoff_s: float = 30.0,
        initial: Mapping[int, XidState] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        gpus: entities to watch; MIG instances are ignored (their XIDs arrive on the parent).
        wait_ms: longest single NVML wait, which bounds how long `stop` takes.
        max_backoff_s: cap of the pause between retries after NVML errors.
        initial: history to continue, e.g. `history()` of the watcher this one replaces
            after a rediscovery, so counts survive it.
        clock: monotonic seconds, stamped on each XID as it is received.
        """
        self._lib = lib
        self._gpus = tuple(g for g in gpus if g.mig is None)
        self._wait_ms = wait_ms
        self._max_backoff_s = max_backoff_s
        self._states: dict[int, XidState] = dict(initial or {})
        self._clock = clock
        # The recent history is appended per XID and frozen into XidState only when read,
        # so an XID storm costs O(1) per event rather than a copy of the whole history.
        self._recent = {
            gpu: deque(state.recent, maxlen=HISTORY_MAX_ENTRIES)
            for gpu, state in self._states.items()
        }
        self._stale: set[int] = set()  # GPUs whose XidState.recent lags self._recent
        self._lock = threading.Lock()
        # A crash-looping job can raise thousands of XIDs a second: each is counted, and
        # logged rate-limited per GPU (one GPU's storm hides no other's first XID).
        self._xid_logs = {g.gpu: ThrottledLog(log, clock=clock) for g in self._gpus}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._by_address: dict[int, int] = {}  # handle address -> gpu index
        self._by_uuid: dict[str, int] = {}
        self._pending: list[Entity] = []  # registration failed, to be tried again
        self._registering = Backoff(base=1.0, cap=max_backoff_s)
        self._register_at = 0.0  # monotonic seconds of the next try of the pending ones
        self._errors = 0
        self._logged: set[object] = set()

    @property
    def errors(self) -> int:
        """NVML errors seen while registering or waiting (timeouts excluded)."""
        return self._errors

    @property
    def running(self) -> bool:
        """Whether the watcher thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def watched(self) -> tuple[int, ...]:
        """Indices of the GPUs whose XID events are registered."""
        with self._lock:
            return self._watched()

    def _watched(self) -> tuple[int, ...]:
        return tuple(sorted(self._by_uuid.values()))

    def snapshot(self) -> Mapping[int, XidState]:
        """XID history of every watched GPU by gpu index (`XidState(last=0, counts={})`
        before its first XID), and of no other GPU: one whose registration failed has no
        XID data, which must not read as "no XID". A copy, safe to keep."""
        with self._lock:
            self._freeze()
            return MappingProxyType(
                {gpu: self._states.get(gpu, _NO_XID) for gpu in self._watched()}
            )

    def history(self) -> Mapping[int, XidState]:
        """Everything recorded, `initial` included, watched or not: what a replacement
        watcher continues from, so a GPU unwatched for a while keeps its counts."""
        with self._lock:
            self._freeze()
            return MappingProxyType(dict(self._states))

    def _freeze(self) -> None:
        """Bring each XidState.recent up to date; called with the lock held."""
        for gpu in self._stale:
            self._states[gpu] = replace(self._states[gpu], recent=tuple(self._recent[gpu]))
        self._stale.clear()

    def start(self) -> None:
        """Register XID events on every GPU that supports them and start the thread.

        Without an event set, or when no GPU registered and none is to be tried again, no
        thread runs (logged); the watcher then simply reports the `initial` history. Raises
        RuntimeError if started twice.
        """
        if self._thread is not None or self._event_set is not None:
            raise RuntimeError("XidWatcher already started")
        try:
            self._event_set = self._lib.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            self._count_error()
            log.error("XID events unavailable: nvmlEventSetCreate failed (%s)", err)
            return
        for gpu in self._gpus:
            self._register(gpu)
        self._retry_later()
        if not self._by_uuid and not self._pending:
            log.warning("XID events unavailable: no GPU accepted the registration")
            self._free_event_set()
            return
        self._thread = threading.Thread(target=self._run, name="xid-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the thread and free the event set. Returns within about `wait_ms` unless
        NVML itself hangs; then the set is left allocated (freeing it under a blocked wait
        is undefined), a warning is logged after `timeout_s` (default: 2 s past
        `wait_ms`), and it returns False: NVML is still in use, and must not be shut
        down either. True when no NVML call of its is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._wait_ms / 1000 + 2.0 if timeout_s is None else timeout_s)
            if self._thread.is_alive():
                log.warning("XID watcher thread did not stop: an NVML wait is hanging")
                return False
        self._free_event_set()
        return True

    def _register(self, gpu: Entity, *, retried: bool = False) -> None:
        """Register one GPU's XID events; one that fails otherwise than NotSupported joins
        `_pending`. A retry that fails again logs nothing: the first failure said it."""
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByUUID(gpu.uuid)
            if not lib.nvmlDeviceGetSupportedEventTypes(handle) & _XID:
                log.info("GPU %d (%s) reports no XID events; not watched", gpu.gpu, gpu.uuid)
                return
            lib.nvmlDeviceRegisterEvents(handle, _XID, self._event_set)
        except pynvml.NVMLError as err:
            if isinstance(err, pynvml.NVMLError_NotSupported):
                log.warning("GPU %d (%s): XID events not watched (%s)", gpu.gpu, gpu.uuid, err)
                return
            self._count_error()
            self._pending.append(gpu)
            if not retried:
                log.warning(
                    "GPU %d (%s): XID events not watched (%s); retrying with backoff",
                    gpu.gpu,
                    gpu.uuid,
                    err,
                )
            return
        address = handle_address(handle)
        with self._lock:
            if address is not None:
                self._by_address[address] = gpu.gpu
            self._by_uuid[gpu.uuid] = gpu.gpu
        if retried:
            log.info("GPU %d (%s): XID events watched now", gpu.gpu, gpu.uuid)

    def _register_pending(self) -> None:
        pending, self._pending = self._pending, []
        for gpu in pending:
            if self._stop.is_set():
                self._pending.append(gpu)
            else:
                self._register(gpu, retried=True)
        self._retry_later()

    def _retry_later(self) -> None:
        """Schedule the next try of the pending GPUs: sooner while fewer tries failed."""
        if self._pending:
            self._register_at = time.monotonic() + self._registering.failed(0.0)
        else:
            self._registering.reset()

    def _run(self) -> None:
        backoff_s = 0.0
        while not self._stop.is_set():
            if self._pending and time.monotonic() >= self._register_at:
                self._register_pending()
            if not self._by_uuid:  # nothing to wait on until a pending GPU registers
                self._stop.wait(min(max(self._register_at - time.monotonic(), 0.0), 1.0))
                continue
            try:
                event = self._lib.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
            except pynvml.NVMLError_Timeout:
                backoff_s = 0.0
                continue
            except Exception as err:  # NVML errors and surprises alike: count, pause, retry
                self._count_error()
                backoff_s = min(max(2 * backoff_s, 0.1), self._max_backoff_s)
                self._log_once(
                    type(err), "waiting for XID events failed (%s); retrying with backoff", err
                )
                self._stop.wait(backoff_s)
                continue
            backoff_s = 0.0
            if event.eventType & _XID:
                self._record(event.device, int(event.eventData))

    def _record(self, device: Any, xid: int) -> None:
        gpu = self._gpu_of(device)
        if gpu is None:
            self._count_error()
            self._log_once("unknown-device", "XID %d from a device not watched; dropped", xid)
            return
        at = self._clock()
        with self._lock:
            previous = self._states.get(gpu, _NO_XID)
            counts = dict(previous.counts)
            counts[xid] = counts.get(xid, 0) + 1
            self._states[gpu] = replace(previous, last=xid, counts=MappingProxyType(counts))
            self._recent.setdefault(gpu, deque(maxlen=HISTORY_MAX_ENTRIES)).append((at, xid))
            self._stale.add(gpu)
        self._xid_logs[gpu].log(logging.WARNING, "XID %d on GPU %d", xid, gpu)

    def _gpu_of(self, device: Any) -> int | None:
        address = handle_address(device)
        if address is not None and address in self._by_address:
            return self._by_address[address]
        # Handles that are not plain pointers: ask NVML (fails if the GPU is already gone).
        try:
            return self._by_uuid.get(text(self._lib.nvmlDeviceGetUUID(device)))
        except pynvml.NVMLError:
            return None

    def _free_event_set(self) -> None:
        if self._event_set is None:
            return
        try:
            self._lib.nvmlEventSetFree(self._event_set)
        except pynvml.NVMLError as err:
            log.debug("nvmlEventSetFree failed: %s", err)
        self._event_set = None

    def _count_error(self) -> None:
        with self._lock:
            self._errors += 1

    def _log_once(self, key: object, message: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)
