"""One collection of the API kept current on a thread of its own: a list, then a watch from
its resourceVersion, as client-go's reflector does. The exporter keeps its node's pods and
the DRA driver's ResourceSlices so; the autoscaler the collections every tick reads.

- A watch the server ends (its `timeoutSeconds`, 5 to 10 minutes) is opened again from
  the last resourceVersion at once.
- A 410 Expired (the server no longer has that version) lists again at once (after a
  backoff where the watch was answered so at once), the objects counted as behind the
  server until the list answers; any other failure (the API down, a 403, an answer that
  does not parse) lists again after a backoff.
- The objects come first by a streaming list, as client-go's reflector asks where the
  server has it (kube-apiserver's WatchList, 1.27 and later where its gate is on): one
  watch that sends every object, then a bookmark marking their end, then the changes, so
  the collection is never one answer decoded whole. One that fails, for any reason (a
  403 for `watch` alone included), or has not ended its objects within SYNC_SECONDS, is
  listed instead that time, as client-go falls back, with a warning line for each new
  reason (a 410 is none: a routine relist); a server that refuses it (422, as 1.33 does
  by default) or cuts CUT_SHORT_LIMIT short in a row is only listed after.
- Lists are client-go's: the first at resourceVersion "0", which the API server's watch
  cache answers without touching etcd; later ones at the last version seen ("not older
  than", from the cache too, whole); one whose version the server no longer has, or has
  not reached, at the newest, from etcd, in pages of 500. A server that pages the first
  list has no watch cache for the resource, and gets every list in pages.
- Meanwhile the objects stay as they were. `items` refuses them once the watch has been
  down longer than its reader allows, so a reader never acts on a state minutes old.
"""

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from gpufleet.core.backoff import Backoff
from gpufleet.core.watch_state import Key, Skipped, WatchExpired, WatchFailed, WatchState
from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call
from gpufleet.kube.listing import PAGE_SIZE, Pages, json_object, list_in_pages, version_unavailable

T = TypeVar("T")
log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 10.0  # to connect, and a watch's answer to start
WATCH_SECONDS = 300  # a watch asks to be ended after 1x to 2x this, as client-go's
FIRST_LIST_SECONDS = 30.0  # how long a first reader waits for the first list
ABSENT_RETRY_SECONDS = 10.0  # how often a CRD that is not installed is looked for
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # a streaming list's end, on a bookmark
SYNC_SECONDS = 60.0  # a streaming list whose objects have not ended by then is listed
CUT_SHORT_LIMIT = 3  # streaming lists cut short in a row before the server is only listed


def _nothing(*_: object) -> None:
    pass


class Reflector(Generic[T]):
    """`call` is the client's list method for the collection (it takes `watch`,
    `resource_version`, `send_initial_events` and the like as keywords: a typed API's, or
    `custom_objects.cluster_custom_objects` for a custom resource); `reduce` keeps what a
    reader needs of each object, and raises (ValueError, KeyError, TypeError) for one it
    cannot read, which is then left out and given to `on_skip`.

    Called on the reflector's thread, never under its lock: `on_change` after each list
    and each event, `on_failure` with each failure, `on_working` once the objects follow
    the server again (a list answered or a watch opened). Retries wait `retry_seconds`,
    doubling with each failure in a row up to `max_retry_seconds`; a failure after a
    minute of working is a first one again.

    `absent_ok`: a custom resource whose CRD may not be installed. A list answered 404 is
    then an answer, "not installed", tried again each ABSENT_RETRY_SECONDS; readers are
    told by a KubeError of kind NOT_FOUND, and through an outage as long as objects are."""

    def __init__(
        self,
        what: str,
        call: Callable[..., Any],
        reduce: Callable[[dict[str, Any]], T],
        *,
        on_change: Callable[[], None] = _nothing,
        on_failure: Callable[[KubeError], None] = _nothing,
        on_working: Callable[[], None] = _nothing,
        on_skip: Callable[[Skipped], None] = _nothing,
        retry_seconds: float = 0.5,
        max_retry_seconds: float = 30.0,
        watch_seconds: int = WATCH_SECONDS,
        list_timeout: float | None = None,
        absent_ok: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self._call = call
        self._on_change = on_change
        self._on_failure = on_failure
        self._on_working = on_working
        self._on_skip = on_skip
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._watch_seconds = watch_seconds
        self._list_timeout = list_timeout
        self._absent_ok = absent_ok
        self._absent = False  # the last list was a 404: the CRD is not installed
        self._clock = clock
        self._reduce = reduce
        self._state: WatchState[T] = WatchState(reduce)  # replaced whole by each list
        self._paged = False  # the first list came in pages: page every list
        self._version_gone = False  # the last list failed for its version: list the newest
        self._streams = True  # until the server refuses a streaming list
        self._cut_short = 0  # streaming lists in a row that ended before their objects did
        self._fallback_said = ""  # why the last streaming list was listed instead, as logged
        self._opened_at = 0.0  # when the watch began to follow the server
        self._lock = threading.Lock()
        self._settled = threading.Event()  # the first list answered, or failed
        self._stopping = threading.Event()
        self._listed = False
        self._error: KubeError | None = None
        self._down_since: float | None = None  # None: the objects follow the server
        # when the open watch is overdue: its server should have ended it by then, so one
        # still open is stuck (a proxy that holds the connection and passes nothing)
        self._overdue_at: float | None = None
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"kube-{what}", daemon=True)
        self.lists = 0  # lists made
        self.watches = 0  # watches opened

    def start(self) -> None:
        """Start the thread; once started, a later call does nothing."""
        if self.thread.ident is None:
            self.thread.start()

    def interrupt(self) -> None:
        """Stop: end the watch now (its socket is shut, not waited out)."""
        self._stopping.set()
        self._settled.set()  # a reader waiting for the first list is told, not kept
        with self._lock:
            response = self._response
        if response is not None:
            _shut(response)

    def stop(self, timeout_seconds: float = CALL_TIMEOUT_SECONDS) -> None:
        self.interrupt()
        if self.thread.is_alive():
            self.thread.join(timeout_seconds)

    def items(self, *, stale_after: float) -> tuple[T, ...]:
        """The objects, in list order. Raises KubeError before the first list has answered
        (waiting for it up to FIRST_LIST_SECONDS) and while the watch has been down for more
        than `stale_after` seconds."""
        if not self._settled.wait(FIRST_LIST_SECONDS):
            raise KubeError(
                KubeErrorKind.UNAVAILABLE,
                f"{self.what}: no list answered in {FIRST_LIST_SECONDS:.0f} s",
            )
        with self._lock:
            if not self._listed:
                raise self._failure("stopped" if self._stopping.is_set() else "never listed")
            now = self._clock()
            down_since = self._down_since
            if down_since is None and self._overdue_at is not None and now > self._overdue_at:
                down_since = self._overdue_at
            if down_since is not None and now - down_since > stale_after:
                raise self._failure(f"watch down for {now - down_since:.0f} s")
            return self._objects()

    def mapping(self) -> dict[Key, T]:
        """The objects by (namespace, name), as they are now (a copy)."""
        with self._lock:
            return self._state.mapping()

    def read(self) -> tuple[T, ...]:
        """List the newest objects now and give them, for a reader that does not watch (the
        thread is not started then). Raises KubeError."""
        self._list(newest=True)
        return self._objects()

    def _objects(self) -> tuple[T, ...]:
        if self._absent:
            raise KubeError(KubeErrorKind.NOT_FOUND, f"{self.what}: not installed (404)")
        return self._state.values()

    def _failure(self, what: str) -> KubeError:
        err = self._error
        if err is None:  # stopped before any failure, or a watch stuck open
            return KubeError(KubeErrorKind.UNAVAILABLE, f"{self.what}: {what}")
        return KubeError(err.kind, f"{self.what}: {what}: {err}", status=err.status)

    # --- the thread ---

    def _run(self) -> None:
        backoff = Backoff(self._retry_seconds, self._max_retry_seconds)
        must_list = True
        while not self._stopping.is_set():
            began = self._clock()
            try:
                if must_list and self._streams and not self._absent and self._watch(stream=True):
                    must_list = False
                elif self._stopping.is_set():  # a streaming list cut short by the stop
                    return
                else:
                    if must_list:
                        self._list()
                        must_list = False
                    if self._absent:  # not installed: looked for again, as each tick did
                        must_list = True
                        backoff.reset()
                        self._stopping.wait(ABSENT_RETRY_SECONDS)
                        continue
                    self._watch()
            except WatchExpired:
                # at once, unless the watch was answered so at once (a hot loop otherwise);
                # the objects are behind the server until the list answers
                must_list = True
                with self._lock:
                    if self._down_since is None:
                        self._down_since = self._clock()
                delay = backoff.ended(self._clock() - self._opened_at)
            except Exception as exc:  # never let the thread die: the objects would freeze
                if self._stopping.is_set():
                    return
                must_list = True
                self._failed(_as_kube_error(exc))
                delay = backoff.failed(self._clock() - began)
            else:
                delay = backoff.ended(self._clock() - began)
            if delay:
                self._stopping.wait(delay)

    def _list(self, *, newest: bool = False) -> None:
        """`newest`: a reader that does not watch, at each tick. Its list is one answer, as
        before pages: pages of the newest are etcd's (before 1.33), one answer the
        cache's (from 1.31)."""
        version = "" if newest or self._version_gone else self._state.version or "0"
        absent = False
        try:
            state, skipped = self._list_at(version, whole=newest)
        except KubeError as err:
            if self._absent_ok and err.kind is KubeErrorKind.NOT_FOUND:
                state, skipped, absent = WatchState(self._reduce), [], True
            elif version and version_unavailable(err):
                self._version_gone = True  # until a list answers, as client-go's reflector
                state, skipped = self._list_at("")
            else:
                raise
        self._replace(state, skipped, absent=absent)

    def _replace(self, state: WatchState[T], skipped: list[Skipped], *, absent: bool) -> None:
        """The objects a list (or a streaming list) answered, in place of the last."""
        self._version_gone = False
        with self._lock:
            self._state = state
            self._absent = absent
            self._listed = True
            recovered = self._working()
        self.lists += 1
        self._settled.set()
        self._after(skipped, recovered)

    def _list_at(self, version: str, *, whole: bool = False) -> tuple[WatchState[T], list[Skipped]]:
        """The objects at `version`, reduced off the lock, page by page."""
        # A limit on a list at a version the watch cache has would send it to etcd.
        paged = not whole and (version in ("", "0") or self._paged)
        limit = PAGE_SIZE if paged else 0

        def reduce(pages: Pages) -> tuple[WatchState[T], list[Skipped]]:
            if version == "0" and pages.paged:
                self._paged = True
            state = WatchState(self._reduce)
            return state, state.replace(pages, pages.version)

        return list_in_pages(
            self._call,
            reduce,
            resource_version=version,
            limit=limit,
            timeout=self._list_timeout,
            stopped=self._stopping.is_set,
        )

    def _watch(self, *, stream: bool = False) -> bool:
        """Watch from the objects' version until the server ends it. `stream`: a streaming
        list, from the last version seen: every object, kept apart until the bookmark
        marking their end, then in place of the objects. False where it failed, or did not
        end its objects within SYNC_SECONDS: the caller lists instead, as client-go falls
        back. A server that refuses it (422), or cuts CUT_SHORT_LIMIT of them short in a
        row, is only listed from then on."""
        if self._stopping.is_set():  # stopped while it listed
            return True
        seconds = int(self._watch_seconds * (1 + random.random()))
        query: dict[str, Any] = (
            {
                "resource_version": "" if self._version_gone else self._state.version,
                "resource_version_match": "NotOlderThan",
                "send_initial_events": True,
            }
            if stream
            else {"resource_version": self._state.version}
        )
        try:
            response = kube_call(
                lambda: self._call(
                    watch=True,
                    timeout_seconds=seconds,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    _request_timeout=(CALL_TIMEOUT_SECONDS, seconds + CALL_TIMEOUT_SECONDS),
                    **query,
                )
            )
        except KubeError as err:
            if stream:
                self._not_streamed(err)
                return False
            if self._absent_ok and err.kind is KubeErrorKind.NOT_FOUND:
                raise WatchExpired("404: the CRD is gone") from None  # the list says so
            raise
        syncing = WatchState(self._reduce) if stream else None  # not shared until it ends
        skipped_syncing: list[Skipped] = []
        abandoned, synced = threading.Event(), threading.Event()
        with self._lock:
            self._response = response
            self._overdue_at = self._clock() + seconds + CALL_TIMEOUT_SECONDS
            recovered = False if stream else self._working()
        self._opened_at = self._clock()
        deadline = None
        if stream:  # started once the response is there to shut
            args = (response, abandoned, synced)
            deadline = threading.Timer(SYNC_SECONDS, self._abandon, args)
            deadline.daemon = True
            deadline.start()
        self.watches += 1
        if recovered:
            self._on_working()
        ended = False
        try:
            if self._stopping.is_set():  # stopped before there was a response to shut
                return True
            for line in iter_resp_lines(response):
                if not line.strip():  # a keep-alive line some proxies send
                    continue
                event = json_object(line)
                if syncing is None:
                    with self._lock:
                        skipped = self._state.apply(event)
                    self._after([] if skipped is None else [skipped], False)
                    continue
                if (skipped := syncing.apply(event)) is not None:
                    skipped_syncing.append(skipped)
                if _initial_events_end(event):
                    with self._lock:  # from here the deadline leaves the watch alone
                        synced.set()
                    self._cut_short, self._fallback_said = 0, ""
                    self._opened_at = self._clock()  # it follows the server from here
                    self._replace(syncing, skipped_syncing, absent=False)
                    syncing = None
            ended = not self._stopping.is_set()
        except (HTTPError, OSError, KubeError, WatchFailed, WatchExpired) as err:
            if syncing is None or self._stopping.is_set():  # a watch's failure, or a stop
                if isinstance(err, (HTTPError, OSError)):
                    raise KubeError(KubeErrorKind.UNAVAILABLE, f"watch broken: {err}") from None
                raise
            # the streaming list failed before its objects' end: this time a list answers
            if isinstance(err, WatchExpired):
                self._version_gone = True
            else:
                self._fell_back(type(err).__name__, f"{type(err).__name__}: {err}")
            abandoned.set()
        finally:
            if deadline is not None:
                deadline.cancel()
            with self._lock:
                self._response = None
                self._overdue_at = None
            if not ended:
                # Shut, broken, or left mid-stream: its connection must not serve the
                # client's next request (a lease release timed out on one).
                response.close()
            response.release_conn()
        if syncing is not None and (ended or abandoned.is_set()):  # its objects never ended
            if ended:
                self._fell_back("cut short", "it ended before the bookmark ending its objects")
            self._cut_short += 1
            if self._cut_short >= CUT_SHORT_LIMIT:
                self._no_streams(f"{CUT_SHORT_LIMIT} streaming lists in a row ended early")
            return False
        return True

    def _no_streams(self, why: str) -> None:
        """List from now on: a line, once, for the operator wondering why."""
        self._streams = False
        log.info("%s: listed from now on, not streamed: %s", self.what, why)

    def _abandon(self, response: Any, abandoned: threading.Event, synced: threading.Event) -> None:
        """On the deadline's thread: give up a streaming list still sending its objects."""
        with self._lock:
            if self._response is not response or synced.is_set():
                return
            abandoned.set()
        _shut(response)
        self._fell_back("slow", f"its objects had not ended within {SYNC_SECONDS:g} s")

    def _not_streamed(self, err: KubeError) -> None:
        """A streaming list's request failed: whatever the failure, this time a list
        answers instead (a 403 for `watch` alone still lists, a 404 says not installed)."""
        if err.kind is KubeErrorKind.INVALID:  # the server has none (WatchList off, < 1.27)
            self._no_streams(str(err))
            return
        if version_unavailable(err):  # the version asked: gone, or not reached
            self._version_gone = True
        elif not (self._absent_ok and err.kind is KubeErrorKind.NOT_FOUND):
            self._fell_back(f"{err.status or err.kind}", str(err))

    def _fell_back(self, reason: str, detail: str) -> None:
        """A line, as client-go's reflector warns, for each new reason a streaming list was
        listed instead; none again for the same reason until a streaming list works."""
        if reason != self._fallback_said:
            self._fallback_said = reason
            log.warning("%s: streaming list failed, listed instead: %s", self.what, detail)

    def _working(self) -> bool:
        """Under the lock: the objects follow the server again. True if they did not."""
        recovered = self._down_since is not None or self._error is not None
        self._down_since = None
        self._error = None
        return recovered

    def _after(self, skipped: list[Skipped], recovered: bool) -> None:
        for s in skipped:
            self._on_skip(s)
        if recovered:
            self._on_working()
        self._on_change()

    def _failed(self, err: KubeError) -> None:
        with self._lock:
            self._error = err
            if self._down_since is None:
                self._down_since = self._clock()
        self._settled.set()  # a first reader is told why, not kept waiting
        self._on_failure(err)


def stop_all(reflectors: Iterable[Reflector[Any]], timeout_seconds: float) -> None:
    """Stop them: every watch's socket shut first, then their threads waited for at most
    `timeout_seconds` in all (one in a list call finishes it alone)."""
    reflectors = tuple(reflectors)
    for reflector in reflectors:
        reflector.interrupt()
    deadline = time.monotonic() + timeout_seconds
    for reflector in reflectors:
        reflector.stop(max(0.0, deadline - time.monotonic()))


def _initial_events_end(event: dict[str, Any]) -> bool:
    """The bookmark that ends a streaming list's objects (`apply` has read the event)."""
    if event.get("type") != "BOOKMARK":
        return False
    annotations = event["object"].get("metadata", {}).get("annotations")
    return isinstance(annotations, dict) and annotations.get(INITIAL_EVENTS_END) == "true"


def _as_kube_error(exc: Exception) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, WatchFailed):
        return KubeError(KubeErrorKind.UNAVAILABLE, f"watch failed: {exc}")
    return KubeError(KubeErrorKind.INVALID, f"{type(exc).__name__}: {exc}")


def _shut(response: Any) -> None:
    """Shut a streaming answer's socket from another thread, so its read ends now."""
    shutdown = getattr(response, "shutdown", None)  # urllib3 2.3 and later
    try:
        if shutdown is not None:
            shutdown()
        else:
            response.close()
    except (HTTPError, OSError, ValueError, RuntimeError):  # ended, or released meanwhile
        pass
