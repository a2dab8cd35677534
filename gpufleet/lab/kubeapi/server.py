"""A fake Kubernetes API server: real REST over real loopback HTTP for the official client.

The official `kubernetes` client and kubectl talk to it as to a kube-apiserver: discovery
(`/api`, `/apis`, `/apis/{group}/{version}`), CRUD on the resources in `resources`, the
`/status` and `/scale` subresources, label and field selectors, lists at a
resourceVersion and in pages (`limit` and `continue`, in `listing`), `Status` errors,
DeleteOptions' preconditions and grace period, dry runs (`dryRun=All`), and watches
(`?watch=1`, in `watch`). Not modelled: finalizers (a DELETE removes the object at once,
pods aside), server-side apply, YAML or protobuf bodies (415), deletecollection. No real
kube-apiserver can be installed here, so tests and the lab run the product's Kubernetes
code against this one.

Faults a test can turn on (`faults`): a delay on every answer, the next N requests failing
with a 5xx, the next N writes answering 409, writes to some paths refused (403) or held
unanswered (a hung admission webhook), and the whole server going down and coming back on
the same port. SubjectAccessReviews are answered from the RBAC objects stored
(`rbac`), as an aggregated API server's delegated authorization needs. A request bearing a
token given to `add_user` is authorized through RBAC as kube-apiserver does (403 when no
role grants it; discovery is open to every user, as `system:discovery` makes it); one
bearing no token is the cluster's admin, as the lab's own controllers are. Every request is
recorded (method, path, User-Agent), so a test can count who wrote what.
"""

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from gpufleet.lab.kubeapi import rbac, validation
from gpufleet.lab.kubeapi.listing import list_answer
from gpufleet.lab.kubeapi.objects import ApiError, bad_request
from gpufleet.lab.kubeapi.resources import RESOURCES, Resource
from gpufleet.lab.kubeapi.store import EVENT_HISTORY, ObjectStore
from gpufleet.lab.kubeapi.watch import BOOKMARK_SECONDS, is_watch, serve_watch
from gpufleet.logs import ThrottledLog, throttle_accept_errors

log = logging.getLogger(__name__)

SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-gpufleet-lab",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))
# kube-apiserver's MaxRequestBodyBytes: a larger body is a 413, never decoded.
MAX_BODY_BYTES = 3 << 20
# How long a stop waits for a handler (a watch whose client stopped reading) before it is
# cancelled.
SHUTDOWN_SECONDS = 1.0
# kube-apiserver's IdleTimeout (secure_serving.go: 90 s, with a ReadHeaderTimeout of 32 s).
# aiohttp has one timer for both, so a half-sent head is also kept up to 90 s; without it,
# a client that never sent a request held its socket for an hour.
IDLE_SECONDS = 90.0


@dataclass(slots=True)
class Faults:
    """What the server does wrong, set by a test; counts go down as faults are served."""

    delay_seconds: float = 0.0
    fail_next: int = 0  # requests answered with `fail_code`
    fail_code: int = 503
    conflict_next_writes: int = 0  # PUT/PATCH answered 409 Conflict ...
    conflict_path_suffix: str = ""  # ... only on paths ending so ("/scale"); "" any
    # POST/PUT/PATCH on paths ending so answered 403, until unset: RBAC without the verb
    forbid_writes_suffix: str = ""
    # POST/PUT/PATCH on paths ending so held unanswered until unset: a hung webhook
    hold_writes_suffix: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    method: str
    path: str
    user_agent: str
    query: str = ""  # the query string, as sent
    status: int
    at: float  # wall-clock seconds the answer was sent


@dataclass(frozen=True, slots=True, kw_only=True)
class _Target:
    res: Resource
    namespace: str | None  # None: across namespaces (or cluster-scoped)
    name: str = ""
    subresource: str = ""


REQUEST_LOG = 50_000


@dataclass(slots=True)
class _State:
    store: ObjectStore
    resources: dict[tuple[str, str], Resource]  # (group/version, plural) -> what is served
    faults: Faults = field(default_factory=Faults)
    # The newest requests only: a lab runs for hours (about 300 bytes a request).
    requests: deque[RequestRecord] = field(default_factory=lambda: deque(maxlen=REQUEST_LOG))
    # bearer token -> (user, groups): the requests authorized through RBAC
    users: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    watch_cache: bool = True  # lists at resourceVersion "0" come whole (see listing)
    held: int = 0  # writes held unanswered now (`Faults.hold_writes_suffix`)


class FakeApiServer:
    """The server on 127.0.0.1 in a thread of its own; `url` is what a client connects to.

    Starts with the namespaces `default` and `kube-system`, as a cluster does.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        port: int = 0,
        event_history: int = EVENT_HISTORY,
        install: tuple[str, ...] = (),
        bookmark_seconds: float = BOOKMARK_SECONDS,
        watch_cache: bool = True,
        watch_list: bool = True,
    ) -> None:
        """`event_history`: how many writes a watch can resume across, or a list or its
        pages be read at (older: 410).
        `install`: optional CRDs to serve, as `{plural}.{group}` (a CRD's name).
        `bookmark_seconds`: how far apart a watch that asks for bookmarks gets them.
        `watch_cache`: False serves lists as a resource without kube-apiserver's watch
        cache does, in pages whatever their resourceVersion.
        `watch_list`: kube-apiserver's WatchList feature gate (streaming lists: on by
        default from 1.34, off in 1.33); off, a watch asking for one is 422."""
        self.store = ObjectStore(clock=clock or time.time, event_history=event_history)
        served = {(r.group_version, r.plural): r for r in RESOURCES if not r.optional}
        self._state = _State(store=self.store, resources=served, watch_cache=watch_cache)
        self.install(*install)
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._closing = False  # open watches end when set
        # A request that fails in a way nothing foresaw: its client's 500, a few lines here.
        self._failures = ThrottledLog(log, clock=time.monotonic)
        self._bookmark_seconds = bookmark_seconds
        self._watch_list = watch_list
        for ns in ("default", "kube-system"):
            self.store.create(_NAMESPACES, "", {"metadata": {"name": ns}})

    def install(self, *crds: str) -> None:
        """Serve these optional CRDs (`{plural}.{group}`) from now on, as applying a CRD
        to a cluster does. ValueError names one that is not an optional CRD."""
        optional = {f"{r.plural}.{r.group}": r for r in RESOURCES if r.optional}
        unknown = set(crds) - set(optional)
        if unknown:
            raise ValueError(f"install: no optional CRD {sorted(unknown)}")
        for crd in crds:  # one dict write each: the server's thread reads them as they come
            res = optional[crd]
            self._state.resources[(res.group_version, res.plural)] = res

    def uninstall(self, *crds: str) -> None:
        """Stop serving these optional CRDs and delete their objects, as deleting a CRD
        does (run on the server's loop, which owns the store)."""
        removed = [r for r in RESOURCES if r.optional and f"{r.plural}.{r.group}" in crds]

        async def delete() -> None:
            for res in removed:
                self._state.resources.pop((res.group_version, res.plural), None)
                for obj in self.store.list(res, None):
                    meta = obj["metadata"]
                    self.store.delete(res, meta.get("namespace", ""), meta["name"])

        self.run_async(delete())

    @property
    def faults(self) -> Faults:
        return self._state.faults

    def add_user(self, token: str, user: str, groups: tuple[str, ...] = ()) -> None:
        """Requests bearing `token` are `user`'s (a service account's is
        `system:serviceaccount:<namespace>:<name>`), authorized through the RBAC objects."""
        self._state.users[token] = (user, ["system:authenticated", *groups])

    @property
    def held_writes(self) -> int:
        """Writes held unanswered now by `faults.hold_writes_suffix`."""
        return self._state.held

    @property
    def requests(self) -> list[RequestRecord]:
        """The newest REQUEST_LOG requests, oldest first (a copy: the server thread adds)."""
        return list(self._state.requests)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> "FakeApiServer":
        """Serve (again, on the same port after `stop`); returns once it accepts requests."""
        ready = threading.Event()
        self._closing = False
        self._loop = asyncio.new_event_loop()
        throttle_accept_errors(self._loop)
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="fake-kube-apiserver", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake API server did not start")
        return self

    def stop(self) -> None:
        """Stop serving; objects are kept for the next `start`."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None

    def run_async(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (where the store and the lab's controllers
        live) and return its result."""
        if self._loop is None:
            raise RuntimeError("the fake API server is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for kubectl and `kubernetes.config.load_kube_config`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": self.url}}],
            "users": [{"name": "lab", "user": {}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
            "current-context": "lab",
        }
        path.write_text(json.dumps(config))
        return path

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=SHUTDOWN_SECONDS,
            keepalive_timeout=IDLE_SECONDS,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port, reuse_address=True)
        await site.start()
        if not self._port:
            self._port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        self._closing = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _held(self, request: web.Request) -> None:
        """While `hold_writes_suffix` names its path, a write is held unanswered."""
        faults, state = self._state.faults, self._state

        def holding() -> bool:
            suffix = faults.hold_writes_suffix
            return (
                bool(suffix)
                and not self._closing
                and request.method in ("POST", "PUT", "PATCH")
                and request.path.endswith(suffix)
            )

        if not holding():
            return
        state.held += 1
        try:
            while holding():
                await asyncio.sleep(0.05)
        finally:
            state.held -= 1

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        state = self._state
        faults = state.faults
        if faults.delay_seconds:
            await asyncio.sleep(faults.delay_seconds)
        try:
            if faults.fail_next > 0:
                faults.fail_next -= 1
                raise ApiError(
                    code=faults.fail_code, reason="ServiceUnavailable", message="injected failure"
                )
            await self._held(request)
            forbid = faults.forbid_writes_suffix
            if (
                forbid
                and request.method in ("POST", "PUT", "PATCH")
                and request.path.endswith(forbid)
            ):
                raise ApiError(code=403, reason="Forbidden", message="injected: no such verb")
            _authorize(state, request)
            if is_watch(request):
                return await self._watch(request)
            body = await _answer(state, request)
            status = 201 if request.method == "POST" else 200
        except ApiError as err:
            body, status = err.status(), err.code
        except Exception as err:  # a bug, or input nothing checked: one 500, not a flood
            self._failures.log(
                logging.ERROR,
                "fake API server: %s %s failed: %s: %s",
                request.method,
                request.path,
                type(err).__name__,
                err,
                exc_info=err,
            )
            failed = ApiError(
                code=500,
                reason="InternalError",
                message=f"Internal error occurred: {type(err).__name__}: {err}",
            )
            body, status = failed.status(), failed.code
        state.requests.append(
            RequestRecord(
                method=request.method,
                path=request.path,
                query=request.query_string,
                user_agent=request.headers.get("User-Agent", ""),
                status=status,
                at=time.time(),
            )
        )
        return web.json_response(body, status=status)

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        target = _target(self._state, [s for s in request.path.split("/") if s])
        if target is None or target.name:
            raise ApiError(
                code=404, reason="NotFound", message="watch needs a collection of a resource"
            )

        def started() -> None:  # recorded once its query is valid (else as the error it is)
            self._state.requests.append(
                RequestRecord(
                    method="WATCH",
                    path=request.path,
                    query=request.query_string,
                    user_agent=request.headers.get("User-Agent", ""),
                    status=200,
                    at=time.time(),
                )
            )

        return await serve_watch(
            self.store,
            request,
            target.res,
            target.namespace,
            closing=lambda: self._closing,
            bookmark_seconds=self._bookmark_seconds,
            watch_list=self._watch_list,
            started=started,
            # a CRD's watches end when it is deleted, as its storage is torn down
            served=lambda: (target.res.group_version, target.res.plural) in self._state.resources,
        )


def _resource_attributes(segments: list[str]) -> dict[str, str] | None:
    """The resource attributes kube-apiserver's RequestInfoFactory reads from a path, served
    or not; None for discovery (/api, /apis/<group>/<version>) and other non-resource URLs."""
    if segments[:1] == ["api"] and len(segments) > 2:
        group, parts = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) > 3:
        group, parts = segments[1], segments[3:]
    else:
        return None
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 2:
        namespace, parts = parts[1], parts[2:]
    return {
        "group": group,
        "resource": parts[0],
        "name": parts[1] if len(parts) > 1 else "",
        "subresource": parts[2] if len(parts) > 2 else "",
        "namespace": namespace,
    }


def _authorize(state: _State, request: web.Request) -> None:
    """Raise the 401 or 403 a request bearing a token gets where its user may not make it."""
    auth = request.headers.get("Authorization", "")
    if not auth:
        return
    token = auth.removeprefix("Bearer ").strip()
    if token not in state.users:
        raise ApiError(code=401, reason="Unauthorized", message="Unauthorized")
    user, groups = state.users[token]
    segments = [s for s in request.path.split("/") if s]
    if segments == ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]:
        attributes = {"group": "authorization.k8s.io", "resource": "subjectaccessreviews"}
    else:
        target = _target(state, segments)
        if target is not None:
            attributes = {
                "group": target.res.group,
                "resource": target.res.plural,
                "subresource": target.subresource,
                "namespace": target.namespace or "",
                "name": target.name,
            }
        elif (unserved := _resource_attributes(segments)) is not None:
            # kube-apiserver authorizes before it routes: a resource it does not serve is a
            # 403 to a user without the grant, not a 404 that reads as "not installed"
            attributes = unserved
        else:
            return  # discovery and /version: every authenticated user's
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if request.method == "GET":
        verb = "get" if attributes.get("name") else ("watch" if is_watch(request) else "list")
    else:
        verb = verbs.get(request.method, request.method.lower())
    store = state.store
    denied = rbac.authorize(
        user,
        groups,
        {**attributes, "verb": verb},
        lambda plural, ns: store.list(_BY_PATH[(_RBAC, plural)], ns),
    )
    if denied is not None:
        raise denied


_BY_PATH: dict[tuple[str, str], Resource] = {(r.group_version, r.plural): r for r in RESOURCES}
_NAMESPACES = _BY_PATH[("v1", "namespaces")]
_RBAC = "rbac.authorization.k8s.io/v1"


async def _answer(state: _State, request: web.Request) -> dict[str, Any]:
    segments = [s for s in request.path.split("/") if s]
    if segments == ["version"]:
        return SERVER_VERSION
    if not segments:  # what kube-apiserver lists at its root: its paths (a browser's view)
        return {"paths": ["/api", "/api/v1", "/apis", *_group_paths(state), "/version"]}
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
            ],
        }
    if segments == ["apis"]:
        return _group_list(state)
    if segments[:1] == ["api"] and len(segments) == 2:
        return _resource_list(state, segments[1])
    if segments[:1] == ["apis"] and len(segments) == 3:
        return _resource_list(state, f"{segments[1]}/{segments[2]}")
    if segments == ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]:
        if request.method != "POST":
            raise _not_allowed(request.method)
        store = state.store
        review = await _json(request)
        if why := validation.misfit(validation.REVIEW_SHAPE, review):
            raise bad_request(why)
        return rbac.review(review, lambda plural, ns: store.list(_BY_PATH[(_RBAC, plural)], ns))
    target = _target(state, segments)
    if target is None:
        raise ApiError(
            code=404, reason="NotFound", message="the server could not find the requested resource"
        )
    faults = state.faults
    if (
        request.method in _WRITES - {"POST", "DELETE"}
        and faults.conflict_next_writes > 0
        and request.path.endswith(faults.conflict_path_suffix)
    ):
        state.faults.conflict_next_writes -= 1
        raise ApiError(code=409, reason="Conflict", message="injected conflict")
    return await _serve_target(state, request, target)


async def _serve_target(state: _State, request: web.Request, t: _Target) -> dict[str, Any]:
    """Answer a request on a resource. The body is read first: the store's part runs with
    no await, so a dry run's writes are undone before any other handler runs."""
    body = await _json(request) if request.method in _WRITES else None
    dry_runs = request.query.getall("dryRun", [])
    if any(value != "All" for value in dry_runs):
        raise bad_request(f'dryRun: Unsupported value: {dry_runs}: supported values: "All"')
    if dry_runs and request.method in _WRITES:  # validated, answered, never stored
        with state.store.rolled_back():
            return _on_store(state, request, t, body)
    return _on_store(state, request, t, body)


def _on_store(state: _State, request: web.Request, t: _Target, body: Any) -> dict[str, Any]:
    store, res, method = state.store, t.res, request.method
    ns = t.namespace or ""
    if not t.name:
        if method == "GET":
            return list_answer(
                store, res, t.namespace, request.query, watch_cache=state.watch_cache
            )
        if method == "POST" and (t.namespace is not None or not res.namespaced):
            return store.create(res, ns, body)
        raise _not_allowed(method)
    if t.subresource == "scale" and res.scale:
        if method == "GET":
            return store.get_scale(res, ns, t.name)
        if method in ("PUT", "PATCH"):
            patch_type = request.content_type if method == "PATCH" else ""
            return store.update_scale(res, ns, t.name, body, patch_type=patch_type)
        raise _not_allowed(method)
    if t.subresource and not (t.subresource == "status" and res.status):
        raise ApiError(code=404, reason="NotFound", message=f"no subresource {t.subresource!r}")
    if method == "GET":
        return store.get(res, ns, t.name)
    if method == "PUT":
        return store.replace(res, ns, t.name, body, subresource=t.subresource)
    if method == "PATCH":
        return store.patch(
            res, ns, t.name, body, content_type=request.content_type, subresource=t.subresource
        )
    if method == "DELETE" and not t.subresource:
        options = {} if body is None else body
        if why := validation.misfit(validation.DELETE_OPTIONS_SHAPE, options):
            raise bad_request(why)
        _check_preconditions(store.get(res, ns, t.name), options.get("preconditions") or {})
        grace = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        # Pods terminate gracefully unless told not to (gracePeriodSeconds 0), as on a real
        # cluster; the lab's kubelet removes them when their grace is over.
        graceful = res.plural == "pods" and str(grace) != "0"
        return store.mark_deleting(res, ns, t.name) if graceful else store.delete(res, ns, t.name)
    raise _not_allowed(method)


def _check_preconditions(current: dict[str, Any], preconditions: dict[str, Any]) -> None:
    """DeleteOptions' preconditions, as the storage checks them: 409 where one differs."""
    meta = current["metadata"]
    for what, key in (("UID", "uid"), ("ResourceVersion", "resourceVersion")):
        wanted = preconditions.get(key)
        if wanted is not None and wanted != meta.get(key):
            raise ApiError(
                code=409,
                reason="Conflict",
                message=(
                    f"Precondition failed: {what} in precondition: {wanted}, {what} in "
                    f"object meta: {meta.get(key)}"
                ),
            )


def _target(state: _State, segments: list[str]) -> _Target | None:
    """Parse a resource path: `/api/v1/...` or `/apis/{group}/{version}/...`."""
    if segments[:1] == ["api"] and len(segments) > 2:
        gv, rest = segments[1], segments[2:]
    elif segments[:1] == ["apis"] and len(segments) > 3:
        gv, rest = f"{segments[1]}/{segments[2]}", segments[3:]
    else:
        return None
    served = state.resources
    if rest[0] == "namespaces" and len(rest) >= 3 and (gv, rest[2]) in served:
        res = served[(gv, rest[2])]
        if not res.namespaced or len(rest) > 5:
            return None
        return _Target(res=res, namespace=rest[1], name=_at(rest, 3), subresource=_at(rest, 4))
    res = served.get((gv, rest[0]))
    if res is None or len(rest) > 3:
        return None
    if res.namespaced and len(rest) > 1:
        return None  # a namespaced object needs its namespace in the path
    return _Target(res=res, namespace=None, name=_at(rest, 1), subresource=_at(rest, 2))


def _at(parts: list[str], index: int) -> str:
    return parts[index] if len(parts) > index else ""


async def _json(request: web.Request) -> Any:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(
            code=413,
            reason="RequestEntityTooLarge",
            message=f"Request entity too large: limit is {MAX_BODY_BYTES}",
        ) from None
    # A PATCH's type is its patch's (the store's to check). Otherwise kube-apiserver
    # decodes by Content-Type, JSON when there is none; this server decodes JSON alone.
    typed = body and request.method != "PATCH" and request.headers.get("Content-Type")
    if typed and request.content_type != "application/json":
        raise ApiError(
            code=415,
            reason="UnsupportedMediaType",
            message="the body of the request was in an unknown format - accepted media "
            "types include: application/json",
        )
    try:
        return json.loads(body or b"null")
    except ValueError as err:
        raise ApiError(code=400, reason="BadRequest", message=f"invalid JSON: {err}") from None
    except RecursionError:  # Go's decoder stops at 10,000 levels
        raise bad_request("invalid JSON: exceeded max depth") from None


def _not_allowed(method: str) -> ApiError:
    return ApiError(
        code=405,
        reason="MethodNotAllowed",
        message=f"the server does not allow this method on the requested resource: {method}",
    )


def _group_paths(state: _State) -> list[str]:
    versions = {gv for gv, _ in state.resources if "/" in gv}
    groups = {gv.split("/")[0] for gv in versions}
    return sorted({f"/apis/{g}" for g in groups} | {f"/apis/{gv}" for gv in versions})


def _group_list(state: _State) -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for r in state.resources.values():
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]},
            }
            for g, versions in groups.items()
        ],
    }


def _resource_list(state: _State, group_version: str) -> dict[str, Any]:
    resources = [r for r in state.resources.values() if r.group_version == group_version]
    if not resources:
        raise ApiError(code=404, reason="NotFound", message=f"no group version {group_version}")
    entries: list[dict[str, Any]] = []
    for r in resources:
        entries.append(
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                **({"shortNames": list(r.short_names)} if r.short_names else {}),
            }
        )
        if r.status:
            entries.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if r.scale:
            entries.append(
                {
                    "name": f"{r.plural}/scale",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": "Scale",
                    "group": "autoscaling",
                    "version": "v1",
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }
