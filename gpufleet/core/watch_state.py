"""A collection kept from a list and the watch events after it, as client-go's store is.

Pure: the reflector (`gpufleet.kube.reflector`) reads the list and the event stream and
hands them here. Each object is kept in a reduced form (what the reader needs of it, a
small fraction of the object's JSON), keyed by namespace and name: a watch delivers one
object's events in order, so a pod deleted and made again under its name is a DELETED,
then an ADDED.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Key = tuple[str, str]  # (namespace, name)


class WatchExpired(Exception):
    """The watch's resourceVersion is older than the server's window (410): list again."""


class WatchFailed(Exception):
    """An ERROR event other than 410, or an event this store cannot read: list again."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """An object its reduction refused (a field of the wrong shape): left out, not fatal."""

    key: Key
    reason: str


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ValueError("an object without metadata.name")
    namespace = meta.get("namespace") or ""
    return (namespace if isinstance(namespace, str) else "", meta["name"])


def _version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return version if isinstance(version, str) else ""


class WatchState(Generic[T]):
    """The objects of one collection as of `version`, reduced by `reduce`."""

    def __init__(self, reduce: Callable[[dict[str, Any]], T]) -> None:
        self._reduce = reduce
        self._items: dict[Key, T] = {}
        self._sorted: tuple[T, ...] | None = ()
        self.version = ""  # resume a watch from here

    def replace(self, items: Iterable[Any], version: str) -> list[Skipped]:
        """A list's answer: every object, and the list's resourceVersion."""
        self._items = {}
        skipped = [s for obj in items if (s := self._put(obj)) is not None]
        self._sorted = None
        self.version = version
        return skipped

    def apply(self, event: Any) -> Skipped | None:
        """One watch event. Raises WatchExpired or WatchFailed where the watch must be
        listed again; returns what was left out of an object that did not reduce."""
        if not isinstance(event, Mapping) or not isinstance(event.get("object"), Mapping):
            raise WatchFailed("a watch event without an object")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code, message = obj.get("code"), obj.get("message") or obj.get("reason") or ""
            if code == 410:
                raise WatchExpired(f"410: {message}")
            raise WatchFailed(f"{code}: {message}")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise WatchFailed(f"a watch event of type {kind!r}")
        version = _version(obj)
        skipped = None
        if kind == "DELETED":
            try:
                self._items.pop(object_key(obj), None)
            except ValueError as err:
                raise WatchFailed(str(err)) from None
            self._sorted = None
        elif kind != "BOOKMARK":
            skipped = self._put(obj)
            self._sorted = None
        if version:
            self.version = version
        return skipped

    def values(self) -> tuple[T, ...]:
        """Every object, in the order a list gives them (by namespace, then name)."""
        if self._sorted is None:
            self._sorted = tuple(self._items[k] for k in sorted(self._items))
        return self._sorted

    def mapping(self) -> dict[Key, T]:
        """Every object by (namespace, name): a copy."""
        return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def _put(self, obj: Any) -> Skipped | None:
        try:
            key = object_key(obj)
        except (ValueError, AttributeError) as err:
            return Skipped(("", ""), str(err))
        try:
            self._items[key] = self._reduce(obj)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            self._items.pop(key, None)  # what it was is no longer so
            return Skipped(key, f"{type(err).__name__}: {err}")
        return None
