"""The collection loop: gather (NVML, XID, kubelet, /proc) -> decide (attribution, series)
-> render -> publish, on its own interval, in its own thread.

Scrapes never wait for this: they serve whatever `ExpositionStore` holds. A collection that
hangs inside NVML is counted as a timeout and the last snapshot keeps being served (and
turns stale for /health); no second collection is started on top of a hung one. Stopping
never frees NVML resources under a collection still in flight: `CollectorLoop.stop` says
whether one is, and the owner then leaks them deliberately rather than free them in use.
"""

import dataclasses
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pynvml

from gpufleet import __version__
from gpufleet.core.server_stats import ServerStats
from gpufleet.exporter.core import attribution
from gpufleet.exporter.core.counters import Selection
from gpufleet.exporter.core.dra import resolve_claims
from gpufleet.exporter.core.fields import CLOCK_EVENT_REASONS_FIELD, CLOCK_EVENTS_COUNT_FIELD
from gpufleet.exporter.core.gpustatus import GpuStatus
from gpufleet.exporter.core.render import Exposition, render
from gpufleet.exporter.core.samples import Entity, EntitySample, NodeSample
from gpufleet.exporter.core.selection import FLEX, DeviceSelector, select_entities, selected
from gpufleet.exporter.core.selfmetrics import SelfStats, self_families
from gpufleet.exporter.core.series import SeriesOptions, build_families
from gpufleet.exporter.core.windows import HISTORY_MAX_ENTRIES
from gpufleet.exporter.http.store import ExpositionStore
from gpufleet.exporter.nvml.reader import ERROR_KINDS, NvmlReader
from gpufleet.exporter.nvml.xid import XidWatcher
from gpufleet.heap import release_free_heap
from gpufleet.logs import OutageLog, ThrottledLog

if TYPE_CHECKING:  # h2 (-k) and the kubernetes client (pod labels, DRA) load only when used
    from gpufleet.exporter.kube.metadata import KubeMetadataWatcher
    from gpufleet.exporter.pods.podresources import PodResourcesWatcher
    from gpufleet.exporter.pods.procfs import PidPodMap

log = logging.getLogger(__name__)
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _process_stats() -> tuple[int | None, float]:
    """(resident bytes, CPU seconds) of this process; RSS None where /proc is absent.

    CPU from the process clock (user + system, ended threads included, as getrusage), so
    no `resource` extension module is loaded for it (issue 15)."""
    try:
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        rss = None
    return rss, time.process_time()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CollectorConfig:
    """What the collector needs from the settings, as plain values."""

    selection: Selection
    options: SeriesOptions
    devices: DeviceSelector = FLEX
    extra_resource_names: tuple[str, ...] = ()
    dra: bool = False  # --kubernetes-enable-dra: place gpu.nvidia.com claims
    rediscover_seconds: float = 60.0  # GPUs coming back, MIG reconfiguration
    self_metrics: bool = True
    openmetrics: bool = False  # render OpenMetrics too (--openmetrics)


class Collector:
    """One node's collection pipeline. `collect_once` is never called concurrently (one
    thread at a time, not always the same one); `count_error` is thread-safe."""

    def __init__(
        self,
        *,
        lib: object,
        reader: NvmlReader,
        config: CollectorConfig,
        store: ExpositionStore,
        kubelet: "PodResourcesWatcher | None" = None,
        kube: "KubeMetadataWatcher | None" = None,
        pid_pods: "PidPodMap | None" = None,
        server_stats: ServerStats | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lib = lib
        self._reader = reader
        self._config = config
        self._store = store
        self._kubelet = kubelet
        self._kube = kube
        self._pid_pods = pid_pods
        self._server_stats = server_stats
        self._clock = clock
        self._wall_clock = wall_clock
        self._errors: Counter[str] = Counter()
        self._errors_lock = threading.Lock()  # count_error comes from the loop's thread
        self._collections = 0
        self._cpu_seconds = 0.0
        self._entities: tuple[Entity, ...] = ()
        self._selected: int | None = None  # entities -d reports, as of the last discovery
        self._said_nothing_selected = False
        self._discovered_at = float("-inf")
        self._rescan_outage = OutageLog(log, "GPU re-scan fails; the last topology is served")
        self._xid: XidWatcher | None = None
        self._index_key: tuple[object, object, tuple[Entity, ...]] | None = None
        self._index = attribution.EMPTY_INDEX
        self._count_clock_events = any(
            f.spec.name == CLOCK_EVENTS_COUNT_FIELD for f in config.selection.metrics
        )
        self._gpu_status = GpuStatus(f.spec.name for f in config.selection.metrics)
        # gpu index -> (monotonic seconds, reasons bitmask) per collection that read them.
        self._clock_events: dict[int, deque[tuple[float, int]]] = {}

    def count_error(self, kind: str) -> None:
        """Count an error seen outside `collect_once` (e.g. a timeout of the loop)."""
        with self._errors_lock:
            self._errors[kind] += 1

    def discover(self) -> tuple[Entity, ...]:
        """Discover the node's GPUs and MIG instances now (the first collection then does
        not); returns them. For startup checks before the loop starts."""
        self._discover(self._clock())
        return self._entities

    def _discover(self, now: float) -> None:
        entities = self._reader.discover()
        self._discovered_at = now
        gpus = tuple(e for e in entities if e.mig is None)
        if self._xid is None or gpus != tuple(e for e in self._entities if e.mig is None):
            previous = None
            if self._xid:  # stop first: an XID between the copy and the stop would be lost
                self._xid.stop()
                previous = self._xid.history()
            self._xid = XidWatcher(self._lib, gpus, initial=previous, clock=self._clock)
            self._xid.start()
        self._entities = entities
        self._selected = len(selected(entities, self._config.devices))

    def _rediscover(self, now: float) -> None:
        """The periodic re-scan. If it fails (a driver reload), the last topology is kept
        and served, and the re-scan tried again in 5 s, not on every collection; the
        first scan has none to keep, and raises."""
        if not self._entities:
            self._discover(now)
            return
        try:
            self._discover(now)
        except pynvml.NVMLError as exc:
            self.count_error("nvml_error")
            self._rescan_outage.failed(str(exc), kind=type(exc).__name__)
            self._discovered_at = now - self._config.rediscover_seconds + 5
            return
        self._rescan_outage.recovered()

    def _attribution_index(self) -> attribution.AttributionIndex:
        # Without -k there is no view (None): the kubelet's and the API's view modules are
        # then never loaded (issue 15), and the index places the entities only.
        view = self._kubelet.view() if self._kubelet else None
        api = self._kube.view() if self._kube else None
        key = (view, api, self._entities)
        if (
            self._index_key is None
            or key[0] is not self._index_key[0]
            or key[1] is not self._index_key[1]
            or key[2] != self._index_key[2]
        ):
            claims, unknown = ((), 0)
            if self._config.dra and view and api:
                claims, unknown = resolve_claims(view.claims, api.devices)
            index = attribution.build_index(
                view.containers if view else (),
                view.checkpoint if view else (),
                self._entities,
                extra_resource_names=self._config.extra_resource_names,
                pods=api.pods if api else None,
                claims=claims,
            )
            unknown += index.stats.unknown_device_ids
            self._index = dataclasses.replace(
                index, stats=dataclasses.replace(index.stats, unknown_device_ids=unknown)
            )
            self._index_key = key
        return self._index

    def collect_once(self) -> Exposition:
        """Collect, render and publish one snapshot; returns it."""
        start, cpu_start = self._clock(), time.thread_time()
        if start - self._discovered_at >= self._config.rediscover_seconds:
            self._rediscover(start)
        nothing_selected = self._selected == 0
        if nothing_selected and not self._said_nothing_selected:  # once each time it happens
            log.warning(
                "-d/--devices selects none of this node's %d GPUs and MIG instances: only "
                "self-metrics are served (gpufleet_exporter_entities is 0)",
                len(self._entities),
            )
        self._said_nothing_selected = nothing_selected
        index = self._attribution_index()
        # Only a GPU several pods share needs its processes (`attribution.attribute`).
        samples, errors = self._reader.collect(start, {gpu for gpu, _ in index.splits})
        status = self._gpu_status
        gpus = status.gpus(samples, self._entities) if status.selected else {}
        samples = select_entities(samples, self._config.devices)
        if errors.get("gpu_lost"):  # a GPU may come back; look again soon
            self._discovered_at = min(
                self._discovered_at, start - self._config.rediscover_seconds + 5
            )
        with self._errors_lock:
            self._errors.update({k: v for k, v in errors.items() if v})
        pids = {p.pid for s in samples for p in s.processes or ()}  # None: unknown
        pid_pods = self._pid_pods.resolve(pids) if self._pid_pods else {}
        attributed = attribution.attribute(index, samples, pid_pods)
        xid = self._xid.snapshot() if self._xid else {}
        node = NodeSample(
            entities=samples,
            node_labels=self._reader.node_labels,
            xid=xid,
            errors=errors,
            collected_monotonic=start,
            clock_events=self._record_clock_events(samples, start),
            gpus=gpus,
            health=status.health(gpus, lost=self._reader.lost_gpus, xid=xid, now=start),
            p2p=self._reader.p2p,
            lost=self._lost_samples(),
        )
        families = build_families(
            node,
            selection=self._config.selection,
            pods=attributed.pods,
            options=self._config.options,
        )
        self._collections += 1
        wall = self._wall_clock()
        if self._config.self_metrics:
            families += self_families(self._self_stats(families, attributed.stats, start, wall))
        exposition = render(
            families,
            collected_at=wall,
            collected_monotonic=start,
            text_gzip=self._store.wants_text_gzip(start),
            openmetrics=self._config.openmetrics,
        )
        self._store.publish(exposition)
        # Counted whole, render and gzip included, so an exposition reports the CPU of the
        # collections before it (its own cannot be known until it is rendered).
        self._cpu_seconds += time.thread_time() - cpu_start
        return exposition

    def _lost_samples(self) -> tuple[EntitySample, ...]:
        """The GPUs -d reports (as of the whole topology) that are lost, with no values."""
        lost = self._reader.lost_gpus
        if not lost:
            return ()
        kept = set(selected(self._entities, self._config.devices))
        return tuple(
            EntitySample(entity=e, values={})
            for e in self._entities
            if e.mig is None and e.gpu in lost and e in kept
        )

    def _record_clock_events(
        self, samples: tuple[EntitySample, ...], now: float
    ) -> Mapping[int, tuple[tuple[float, int], ...]]:
        """Append each GPU's clock event reasons of this collection to its history and
        drop what has left the window; returns the histories for DCGM_EXP_CLOCK_EVENTS_COUNT.
        A collection where a GPU's reasons were unreadable adds nothing (it is not counted
        as "no reason"); a GPU gone for a whole window loses its history."""
        if not self._count_clock_events:
            return {}
        for sample in samples:
            reasons = sample.values.get(CLOCK_EVENT_REASONS_FIELD)
            if sample.entity.mig is None and reasons is not None:
                history = self._clock_events.setdefault(
                    sample.entity.gpu, deque(maxlen=HISTORY_MAX_ENTRIES)
                )
                history.append((now, int(reasons)))
        start = now - self._config.options.clock_events_window_ms / 1000.0
        for gpu, history in list(self._clock_events.items()):
            while history and history[0][0] <= start:
                history.popleft()
            if not history:
                del self._clock_events[gpu]
        return {gpu: tuple(history) for gpu, history in sorted(self._clock_events.items())}

    def _self_stats(self, families, stats, start: float, wall: float) -> SelfStats:
        rss, cpu = _process_stats()
        kubelet_errors: Mapping[str, int] = self._kubelet.errors() if self._kubelet else {}
        xid_errors = self._xid.errors if self._xid else 0
        with self._errors_lock:
            # every kind from 0, so an increase() alert (GPUFallenOffBus) sees the first
            errors = {**dict.fromkeys(ERROR_KINDS, 0), **self._errors, "xid_watch": xid_errors}
        server = self._server_stats
        return SelfStats(
            version=__version__,
            collections_total=self._collections,
            collection_duration_seconds=self._clock() - start,
            collection_cpu_seconds_total=self._cpu_seconds,
            last_success_timestamp_seconds=wall,
            series=sum(len(f.samples) for f in families),
            entities_selected=self._selected,
            errors_total=errors,
            kubelet_errors_total=kubelet_errors,
            kube_api_errors_total=self._kube.errors() if self._kube else {},
            kubelet_last_success_timestamp_seconds=(
                self._kubelet.last_success_at if self._kubelet else None
            ),
            attribution=dataclasses.asdict(stats),
            requests_total=dict(server.requests_total) if server else {},
            request_seconds_total=dict(server.request_seconds_total) if server else {},
            write_timeouts_total=server.write_timeouts_total if server else 0,
            bad_requests_total=server.bad_requests_total if server else 0,
            accept_errors_total=server.accept_errors_total if server else 0,
            resident_memory_bytes=rss,
            process_cpu_seconds_total=cpu,
        )

    def close(self) -> bool:
        """Stop the XID watcher and free NVML resources; never while `collect_once` runs.
        False when the XID watcher is still inside a hung NVML wait: NVML must then not be
        shut down (its resources are left allocated)."""
        if self._xid and not self._xid.stop():
            return False
        self._reader.close()
        return True


class CollectorLoop:
    """Runs `collect_once` every `interval_seconds` (fixed rate, monotonic).

    Each collection runs on a fresh daemon thread, never two at once: a collection hung in
    the driver then neither blocks the next tick's bookkeeping nor the interpreter's exit.
    """

    def __init__(
        self, collector: Collector, *, interval_seconds: float, timeout_seconds: float
    ) -> None:
        self._collector = collector
        self._interval = interval_seconds
        self._timeout = timeout_seconds
        self._cond = threading.Condition()  # guards the two flags below
        self._stopping = False
        self._in_flight = False
        self._thread = threading.Thread(target=self._run, name="gpufleet-collector", daemon=True)
        # A GPU slow or failing on every collection: lines when it starts and ends, not
        # one a collection (8,640 a day at the defaults)
        self._slow = OutageLog(log, "collection")
        self._failures = ThrottledLog(log, clock=time.monotonic)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_seconds: float | None = None) -> bool:
        """Stop scheduling and wait up to `timeout_seconds` (default: the collection
        timeout) for the collection in flight. Returns True when none is left running;
        False means NVML is still in use and must be neither closed nor shut down."""
        wait = self._timeout if timeout_seconds is None else timeout_seconds
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            quiescent = self._cond.wait_for(lambda: not self._in_flight, wait)
        if not quiescent:
            log.warning(
                "a collection is still running after %.1f s; NVML resources are left "
                "allocated rather than freed under it",
                wait,
            )
        return quiescent

    def _collect(self) -> None:
        try:
            self._collector.collect_once()
            # The last snapshot's bytes are free now; without this RSS sits at the peak.
            release_free_heap()
        except Exception as exc:
            nvml = isinstance(exc, pynvml.NVMLError)
            self._collector.count_error("nvml_error" if nvml else "unexpected")
            self._failures.log(logging.ERROR, "collection failed", exc_info=True)
        finally:
            with self._cond:
                self._in_flight = False
                self._cond.notify_all()

    def _settled(self) -> bool:
        return not self._in_flight or self._stopping

    def _started(self, worker: threading.Thread) -> bool:
        """Start a collection's thread. A start that fails ("can't start new thread": a
        pids limit) is counted and logged, and leaves nothing in flight: it killed the
        loop for good, and the daemon served its last snapshot on."""
        try:
            worker.start()
        except RuntimeError:
            self._in_flight = False
            self._collector.count_error("unexpected")
            self._failures.log(logging.ERROR, "cannot start a collection", exc_info=True)
            return False
        return True

    def _run(self) -> None:
        next_at = time.monotonic()
        with self._cond:  # released while waiting
            while not self._stopping:
                self._in_flight = True
                worker = threading.Thread(
                    target=self._collect, name="gpufleet-collect", daemon=True
                )
                if not self._started(worker):
                    pass  # counted and logged; the next tick tries again
                elif not self._cond.wait_for(self._settled, self._timeout):
                    self._collector.count_error("timeout")
                    self._slow.failed(f"still running after {self._timeout:.1f} s")
                    self._cond.wait_for(self._settled)  # never a second one on a hung one
                else:
                    self._slow.recovered()
                next_at += self._interval
                now = time.monotonic()
                if next_at < now:  # fell behind (slow or hung collection): skip, don't burst
                    next_at = now + self._interval
                self._cond.wait_for(lambda: self._stopping, next_at - now)
