"""Health watching: NVML XID events and usability probes fed to the pure `core.health` decisions.

Exists to turn NVML's event set into a stream of device-health maps for `ListAndWatch`. One
daemon thread waits on the event set with a short timeout (so an XID reaches `on_change`
well under 1 s and `stop` is prompt) and probes every GPU on an interval; `core.health` decides.

It must never die of an NVML error: failures are counted and retried with backoff. It
must never report a GPU healthy that it cannot watch: if NVML init or the event set fails,
or `max_wait_errors` waits in a row fail (NVIDIA marks all unhealthy on any wait error),
every device is reported Unhealthy (NVIDIA PRs #1641/#2037: healthy-looking GPUs on a broken
node cause admission-error storms) and setup is torn down and retried with backoff; devices
then recover through the usual quiet period, once an event wait succeeds again (a probe
alone recovers no GPU while the events it would miss cannot be read). A GPU whose XID
registration fails stays Unhealthy until a later retry succeeds and it recovers. Backoff
never delays the probes: they keep their own schedule, so a lost GPU is found within a
probe interval regardless. A config reload retargets the running watcher (`retarget`), so
no GPU's state, event or error count is lost to it.
"""

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pynvml

from gpufleet.nvml.values import handle_address, text
from gpufleet.plugin.core.health import (
    Decision,
    GpuCondition,
    HealthPolicy,
    HealthState,
    Reason,
    XidEvent,
    device_health,
    on_event,
    on_probe,
    on_unwatched,
)
from gpufleet.plugin.core.model import Health

log = logging.getLogger(__name__)

_XID = pynvml.nvmlEventTypeXidCriticalError
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of an XID that is not MIG-scoped
_LOGGED = {  # decisions worth a log line, and at which level
    Reason.CRITICAL_XID: logging.WARNING,
    Reason.GPU_UNUSABLE: logging.WARNING,
    Reason.IGNORED_XID: logging.INFO,
    Reason.USABLE: logging.INFO,
    Reason.RECOVERED: logging.INFO,
}

OnChange = Callable[[Mapping[str, Health]], None]


class HealthWatcher:
    """Watches the GPUs of `groups` and reports every change of their devices' health."""

    def __init__(
        self,
        lib: Any,
        groups: Mapping[str, Sequence[str]],
        *,
        policy: HealthPolicy,
        on_change: OnChange,
        recovery_seconds: float | None,
        clock: Callable[[], float] = time.monotonic,
        wait_ms: int = 100,
        probe_interval_seconds: float = 0.5,
        max_backoff_seconds: float = 5.0,
        max_wait_errors: int = 3,
    ) -> None:
        """Args:
        groups: GPU UUID -> every device ID advertised for it (replicas, MIG devices).
        on_change: called from the watcher thread with the full device -> health map,
            first once the watcher knows it, then on every change. Must not block long.
        recovery_seconds: quiet period before an unhealthy GPU is Healthy again; None
            never recovers (NVIDIA's behaviour).
        clock: monotonic seconds; stamps XIDs and probes, times the quiet period.
        wait_ms: longest NVML event wait (<= 200 keeps XID-to-update under 1 s).
        max_wait_errors: event waits failing in a row before every device is Unhealthy
            and the event set is rebuilt.
        """
        self._lib = lib
        self._groups = {uuid: tuple(ids) for uuid, ids in groups.items()}
        self._policy = policy
        self._on_change = on_change
        self._recovery_seconds = recovery_seconds
        self._clock = clock
        self._wait_ms = wait_ms
        self._probe_interval_seconds = probe_interval_seconds
        self._max_backoff_seconds = max_backoff_seconds
        self._max_wait_errors = max_wait_errors
        self._wait_errors = 0  # consecutive; watcher thread only
        # The last event wait succeeded (or XIDs are not watched): only then may a probe
        # recover a GPU. Watcher thread only.
        self._events_ok = False
        self._backoff_seconds = 0.0
        # Real time, not `clock`: retries must go on while a test's manual clock stands still.
        self._retry_at = 0.0
        self._states: dict[str, HealthState] = {}  # watcher thread only
        self._unregistered: set[str] = set()  # GPUs whose XID registration failed
        self._by_address: dict[int, str] = {}  # device handle address -> GPU UUID
        self._event_set: Any = None
        self._initialized = False
        self._published: Mapping[str, Health] | None = None
        self._errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        # (groups, on_change) a reload handed over, for the watcher thread to take
        self._pending: tuple[dict[str, tuple[str, ...]], OnChange] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def health(self) -> Mapping[str, Health]:
        """The device -> health map last reported (empty before the first report)."""
        return self._published or MappingProxyType({})

    @property
    def errors(self) -> Mapping[str, int]:
        """Failures by kind: `init`, `registration`, `wait`, `callback`."""
        with self._lock:
            return dict(self._errors)

    def start(self) -> None:
        """Start watching. With every check disabled, reports all devices Healthy once and
        starts no thread. Raises RuntimeError if started twice."""
        if self._thread is not None or self._published is not None:
            raise RuntimeError("HealthWatcher already started")
        if self._policy.disabled:
            log.info("health checks disabled (DP_DISABLE_HEALTHCHECKS=all): all Healthy")
            self._states = {uuid: HealthState(uuid=uuid) for uuid in self._groups}
            self._publish()
            return
        self._thread = threading.Thread(target=self._run, name="health-watcher", daemon=True)
        self._thread.start()

    def retarget(self, groups: Mapping[str, Sequence[str]], on_change: OnChange) -> None:
        """Watch `groups` from now on and report to `on_change` (a config reload changed
        the devices advertised). The GPUs still watched keep their state (one awaiting a
        reset stays Unhealthy) and the event set goes on delivering their XIDs; a GPU new
        to the watcher starts Healthy once it is watched. `on_change` gets the full map
        soon after, from the watcher thread (at once where no thread runs)."""
        with self._lock:
            self._pending = ({uuid: tuple(ids) for uuid, ids in groups.items()}, on_change)
        if self._thread is None:  # every check disabled: no thread would take it
            self._take_pending()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (within about `wait_ms`), free the event set, shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._wait_ms / 1000 + timeout_s)
            if self._thread.is_alive():
                log.warning("health watcher did not stop: an NVML call is hanging")

    # --- thread -------------------------------------------------------------------

    def _run(self) -> None:
        next_probe = self._clock()
        try:
            while not self._stop.is_set():
                self._take_pending()
                if not self._initialized and not (self._retry_due() and self._setup()):
                    self._idle()
                    continue
                if self._retry_due():
                    self._wait_for_event()
                else:
                    self._idle()
                if self._initialized and self._clock() >= next_probe:
                    self._probe_all()
                    next_probe = self._clock() + self._probe_interval_seconds
        finally:
            self._teardown()

    def _take_pending(self) -> None:
        """Apply what `retarget` handed over, if anything."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        self._groups, self._on_change = pending
        for uuid in set(self._states) - set(self._groups):
            del self._states[uuid]
        self._unregistered &= set(self._groups)
        if self._initialized or self._policy.disabled:  # else `_setup` makes the states
            new = set(self._groups) - set(self._states)
            for uuid in new:
                self._states[uuid] = HealthState(uuid=uuid, since=self._clock())
            if self._initialized:
                self._unregistered |= new
                self._register_pending()
        self._published = None  # the new `on_change` has been told nothing yet
        self._publish()

    def _retry_due(self) -> bool:
        return time.monotonic() >= self._retry_at

    def _idle(self) -> None:
        """Sleep until the backoff ends, at most `wait_ms` so probes and `stop` stay prompt."""
        remaining = self._retry_at - time.monotonic()
        self._stop.wait(min(max(remaining, 0.0), self._wait_ms / 1000))

    def _back_off(self) -> None:
        self._backoff_seconds = min(max(2 * self._backoff_seconds, 0.1), self._max_backoff_seconds)
        self._retry_at = time.monotonic() + self._backoff_seconds

    def _watch_ok(self) -> None:
        self._backoff_seconds = 0.0
        self._wait_errors = 0
        self._events_ok = True

    def _setup(self) -> bool:
        """Init NVML and register XID events; False (all devices Unhealthy) on failure."""
        try:
            self._lib.nvmlInit()
            self._initialized = True
            if self._policy.watches_xids:
                self._event_set = self._lib.nvmlEventSetCreate()
        except Exception as err:
            self._count("init")
            self._teardown()
            self._unwatch_all(f"NVML health checks unavailable ({type(err).__name__}: {err})")
            self._back_off()
            return False
        self._events_ok = False  # until a wait on the new event set succeeds
        # States survive a rebuild (a GPU awaiting a reset must stay so); only GPUs never
        # watched before start Healthy.
        for uuid in self._groups:
            self._states.setdefault(uuid, HealthState(uuid=uuid, since=self._clock()))
        self._unregistered = set(self._groups)
        self._register_pending()
        self._publish()
        return True

    def _unwatch_all(self, why: str) -> None:
        """Report every device Unhealthy: GPUs with a state through the state machine (so
        they recover as usual once watched), the rest by having no state."""
        if self._published is None or any(h is Health.HEALTHY for h in self.health.values()):
            devices = sum(len(ids) for ids in self._groups.values())
            log.error("%s: marking all %d devices Unhealthy; retrying with backoff", why, devices)
        now = self._clock()
        for uuid, state in list(self._states.items()):
            self._states[uuid] = on_unwatched(state, now=now).state
        self._publish()

    def _register_pending(self) -> None:
        """(Re)try XID registration of every GPU not yet registered; those that fail are
        held Unhealthy (they can only recover once registered and probed usable)."""
        for uuid in sorted(self._unregistered):
            try:
                handle = self._lib.nvmlDeviceGetHandleByUUID(uuid)
                if self._event_set is not None:
                    self._register(handle, uuid)
            except pynvml.NVMLError as err:
                self._count("registration")
                state = self._states[uuid]
                if state.condition is not GpuCondition.UNHEALTHY:
                    self._apply(on_unwatched(state, now=self._clock()))
                    log.warning("GPU %s: health events not registered (%s)", uuid, err)
                continue
            self._unregistered.discard(uuid)
            address = handle_address(handle)
            if address is not None:
                self._by_address[address] = uuid

    def _register(self, handle: Any, uuid: str) -> None:
        if not self._lib.nvmlDeviceGetSupportedEventTypes(handle) & _XID:
            log.info("GPU %s reports no XID events; watched by probing only", uuid)
            return
        self._lib.nvmlDeviceRegisterEvents(handle, _XID, self._event_set)

    def _wait_for_event(self) -> None:
        """Wait up to `wait_ms` for one event and apply it; back off after a wait error, and
        after `max_wait_errors` in a row unwatch every GPU and tear down for a fresh setup."""
        if self._event_set is None:  # XID checks off: only probing
            self._stop.wait(self._wait_ms / 1000)
            self._watch_ok()
            return
        try:
            event = self._lib.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
        except pynvml.NVMLError_Timeout:
            self._watch_ok()
            return
        except Exception as err:  # NVML errors and surprises alike: count, back off, retry
            self._count("wait")
            self._events_ok = False
            self._wait_errors += 1
            if self._wait_errors >= self._max_wait_errors:
                self._wait_errors = 0
                self._unwatch_all(f"waiting for XID events failed {self._max_wait_errors} times")
                self._teardown()
            else:
                log.warning("waiting for XID events failed (%s); retrying with backoff", err)
            self._back_off()
            return
        self._watch_ok()
        if event.eventType & _XID:
            self._on_xid(event)

    def _on_xid(self, event: Any) -> None:
        xid = int(event.eventData)
        uuid = self._uuid_of(event.device)
        if uuid is None or uuid not in self._states:
            log.warning("XID %d from a device not watched; dropped", xid)
            return
        gi = int(event.gpuInstanceId)
        scoped = XidEvent(xid=xid, gi_id=None if gi == _NO_INSTANCE else gi)
        self._apply(on_event(self._states[uuid], scoped, now=self._clock(), policy=self._policy))

    def _uuid_of(self, device: Any) -> str | None:
        address = handle_address(device)
        if address is not None and address in self._by_address:
            return self._by_address[address]
        try:  # handles that are not plain pointers: ask NVML (fails once the GPU is gone)
            return text(self._lib.nvmlDeviceGetUUID(device))
        except pynvml.NVMLError:
            return None

    def _probe_all(self) -> None:
        if self._unregistered:
            self._register_pending()
        if not self._policy.probe_checked:
            return
        for uuid in self._groups:
            if uuid in self._unregistered:
                continue
            usable = self._usable(uuid)
            if usable and not self._events_ok:
                continue  # the XIDs it would need to see cannot be read: no recovery yet
            state = self._states[uuid]
            self._apply(
                on_probe(state, usable, now=self._clock(), recovery_seconds=self._recovery_seconds)
            )

    def _usable(self, uuid: str) -> bool:
        """Whether NVML answers for the GPU: a lost or failing GPU is not usable."""
        try:
            handle = self._lib.nvmlDeviceGetHandleByUUID(uuid)
            self._lib.nvmlDeviceGetMemoryInfo(handle)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission):
            return True  # it answered (a MIG-enabled GPU's aggregate needs privileges)
        except pynvml.NVMLError:
            return False
        return True

    def _apply(self, decision: Decision) -> None:
        self._states[decision.state.uuid] = decision.state
        level = _LOGGED.get(decision.reason)
        if level is not None:
            log.log(
                level, "GPU %s: %s (%s)", decision.state.uuid, decision.message, decision.reason
            )
        self._publish()

    def _publish(self) -> None:
        health = MappingProxyType(dict(device_health(self._states, self._groups)))
        if health == self._published:
            return
        self._published = health
        try:
            self._on_change(health)
        except Exception:  # the plugin's bug must not stop health watching
            self._count("callback")
            log.exception("health on_change callback failed")

    def _teardown(self) -> None:
        if self._event_set is not None:
            try:
                self._lib.nvmlEventSetFree(self._event_set)
            except pynvml.NVMLError as err:
                log.debug("nvmlEventSetFree failed: %s", err)
            self._event_set = None
        self._by_address.clear()
        if self._initialized:
            self._initialized = False
            try:
                self._lib.nvmlShutdown()
            except pynvml.NVMLError as err:
                log.debug("nvmlShutdown failed: %s", err)

    def _count(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] += 1
