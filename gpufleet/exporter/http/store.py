"""The published exposition: what a scrape serves, swapped atomically after each collection."""

from gpufleet.exporter.core.render import Exposition

# Longer than any sane scrape interval, so a scraper that wants gzip text keeps getting it.
TEXT_GZIP_DEMAND_SECONDS = 300.0


class ExpositionStore:
    """Holds the latest Exposition. Publishing replaces one reference, which is atomic in
    CPython, so readers never lock and never see a half-built snapshot.

    It also records when a scrape last asked for gzip-compressed text, so collections
    compress only what is read: gzip is a large share of a collection's CPU, and clients
    that never ask for gzip (curl, some agents) should not pay for it. A scrape asking for
    gzip text not built yet gets the uncompressed bytes once; snapshots carry it while
    such scrapes keep coming, within `TEXT_GZIP_DEMAND_SECONDS`.
    """

    __slots__ = ("_latest", "_text_gzip_asked_at")

    def __init__(self) -> None:
        self._latest: Exposition | None = None
        self._text_gzip_asked_at: float | None = None

    def want_text_gzip(self, now_monotonic: float) -> None:
        """A scrape asked for gzip-compressed Prometheus text."""
        self._text_gzip_asked_at = now_monotonic

    def wants_text_gzip(self, now_monotonic: float) -> bool:
        asked = self._text_gzip_asked_at
        return asked is not None and now_monotonic - asked <= TEXT_GZIP_DEMAND_SECONDS

    def publish(self, exposition: Exposition) -> None:
        self._latest = exposition

    def latest(self) -> Exposition | None:
        return self._latest
