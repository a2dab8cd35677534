"""The published exposition: what a scrape serves, swapped atomically after each collection."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Exposition:
    """One rendered snapshot, in every encoding a scrape may ask for."""

    text: bytes  # Prometheus text format 0.0.4
    text_gzip: bytes
    openmetrics: bytes  # OpenMetrics 1.0.0, ends with "# EOF"
    openmetrics_gzip: bytes
    collected_at: float  # wall-clock seconds of the collection
    collected_monotonic: float  # monotonic seconds of the collection, for staleness


class SnapshotStore:
    """Holds the latest Exposition. Publishing replaces one reference, which is atomic in
    CPython, so readers never lock and never see a half-built snapshot."""

    __slots__ = ("_latest",)

    def __init__(self) -> None:
        self._latest: Exposition | None = None

    def publish(self, exposition: Exposition) -> None:
        self._latest = exposition

    def latest(self) -> Exposition | None:
        return self._latest
