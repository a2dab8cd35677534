"""events.k8s.io/v1 Events, deduplicated as client-go's event recorder does.

The same event (regarding object, type, reason, action, note) again within
`window_seconds` does not create a new object: the first one's `series.count` and
`series.lastObservedTime` are updated, so a decision repeated every tick is one Event with
a count, not thousands. The cache of recent events is bounded.

An Event is named as client-go's recorder names it (`tools/events/event_recorder.go`,
`makeEvent`): `<regarding name>.<UnixNano in hex>`. A `generateName` of `<name>.` ends in a
dot, which the API server's `NameIsDNSSubdomain` refuses: every Event was a 422.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpufleet.kube.errors import kube_call

MERGE_PATCH = "application/merge-patch+json"
_MAX_KEYS = 4096
_NAME_MAX = 253  # a DNS-1123 subdomain


NOTE_LIMIT_BYTES = 1024  # events.k8s.io's limit on `note`, in bytes (Go's len)


class MicroTime(datetime):
    """metav1.MicroTime, which the API server parses with exactly six fractional digits.
    The client holds a body's times as datetimes (it validates dict bodies into its models)
    and writes them with isoformat(), which drops a zero microsecond: a Lease renewed, or
    an Event made, on a whole second was refused. This one always writes six."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return super().isoformat(sep, "microseconds")

    @classmethod
    def of(cls, value: datetime) -> "MicroTime":
        """`value` (as the client read it back) written with six digits."""
        return cls(
            value.year,
            value.month,
            value.day,
            value.hour,
            value.minute,
            value.second,
            value.microsecond,
            tzinfo=value.tzinfo or UTC,
        )


def micro_time(seconds: float) -> MicroTime:
    """A metav1.MicroTime of `seconds` since the epoch, UTC."""
    return MicroTime.fromtimestamp(seconds, UTC)


class EventRecorder:
    """Records Events for one controller instance, from several threads at once, but for
    one object from one at a time (the autoscaler runs one step per workload at a time):
    two calls about the same object could both create its Event."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        controller: str,
        instance: str,
        clock: Callable[[], float] = time.time,
        window_seconds: float = 360.0,
    ) -> None:
        self._events = client.EventsV1Api(api)
        self._controller = controller
        self._instance = instance
        self._clock = clock
        self._window = window_seconds
        # key -> (event name, count, when first recorded); the autoscaler records from up to
        # STEP_CONCURRENCY threads, and a trim by one could pop the key another just moved
        self._recent: OrderedDict[tuple[str, ...], tuple[str, int, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._last_ns = 0  # names stay unique when two Events share a clock reading

    def record(
        self,
        *,
        regarding: Mapping[str, str],
        type_: str,
        reason: str,
        action: str,
        note: str,
    ) -> None:
        """One Event about `regarding` (kind, name, namespace, apiVersion). Raises KubeError."""
        now = self._clock()
        namespace = regarding.get("namespace", "default")
        key = (
            namespace,
            regarding.get("kind", ""),
            regarding.get("name", ""),
            type_,
            reason,
            action,
            note,
        )
        seen = self._recent.get(key)
        if seen is not None and now - seen[2] < self._window:
            name, count, first = seen
            patch = {"series": {"count": count + 1, "lastObservedTime": micro_time(now)}}
            kube_call(
                lambda: self._events.patch_namespaced_event(
                    name, namespace, patch, _content_type=MERGE_PATCH
                )
            )
            self._remember(key, (name, count + 1, first))
            return
        body: dict[str, Any] = {
            "metadata": {"name": self._name(regarding.get("name") or "event", now)},
            "eventTime": micro_time(now),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "note": note.encode()[:NOTE_LIMIT_BYTES].decode(errors="ignore"),
            "type": type_,
            "regarding": dict(regarding),
        }
        created = kube_call(lambda: self._events.create_namespaced_event(namespace, body))
        self._remember(key, (created.metadata.name, 1, now))

    def _name(self, regarding: str, now: float) -> str:
        with self._lock:
            self._last_ns = max(int(now * 1e9), self._last_ns + 1)
            suffix = f".{self._last_ns:x}"
        # A regarding name near the 253-character limit is cut, and must still end in an
        # alphanumeric before the dot.
        return regarding[: _NAME_MAX - len(suffix)].rstrip("-.") + suffix

    def _remember(self, key: tuple[str, ...], value: tuple[str, int, float]) -> None:
        with self._lock:
            self._recent[key] = value
            self._recent.move_to_end(key)
            while len(self._recent) > _MAX_KEYS:
                self._recent.popitem(last=False)
