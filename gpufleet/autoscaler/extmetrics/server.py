"""HTTPS for `external.metrics.k8s.io/v1beta1`, as an aggregated API server answers it.

Discovery (`/apis`, `/apis/external.metrics.k8s.io/v1beta1`) and
`GET .../namespaces/{ns}/{metric}?labelSelector=...`, answered from the newest snapshot
the controller published: no PromQL per request. Every request is authenticated as the
aggregator proxies it (its client certificate, verified against the request-header CA,
with an allowed name; the user in the auth-proxy headers) and authorized with a
SubjectAccessReview, cached for 10 s as kube's delegating authorizer does; as its defaults,
`system:masters` (the aggregator's availability probe) needs no review, and `/healthz`,
`/readyz` and `/livez` answer `ok` to anyone. Failures are
`Status` bodies: 401 unauthenticated, 403 forbidden, 400 a bad label selector, 404 an
unknown metric or path, 405 a method other than GET or HEAD, 500 when the review itself
fails. A connection idle, or stuck in a request head, for `IDLE_TIMEOUT_SECONDS` is closed,
as the daemons' own server closes it: clients that never finish cannot hold its sockets.
"""

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from kubernetes import client

from gpufleet.autoscaler.core import extmetrics as em
from gpufleet.autoscaler.core.requestheader import (
    CONFIGMAP,
    NAMESPACE,
    RequestHeaderConfig,
    UserInfo,
    access_review,
    forbidden_message,
    name_allowed,
    parse_config,
    resource_attributes,
    user_from_headers,
)
from gpufleet.core.selectors import Requirement, SelectorError, parse_selector
from gpufleet.http.tls_reload import ReloadingContext
from gpufleet.kube.errors import KubeError, kube_call

log = logging.getLogger(__name__)
# k8s.io/apiserver's delegating authorizer defaults (--authorization-webhook-cache-*-ttl).
ALLOW_TTL_SECONDS = 10.0
DENY_TTL_SECONDS = 10.0
# Its AlwaysAllowPaths and AlwaysAllowGroups: a probe must not hang on an authorization
# outage, and kube-apiserver grants system:masters everything without asking anyone.
ALWAYS_ALLOW_PATHS = frozenset(("/healthz", "/readyz", "/livez"))
ALWAYS_ALLOW_GROUP = "system:masters"
_METRIC_PREFIX = ("apis", em.GROUP, em.VERSION, "namespaces")
_METHODS = ("GET", "HEAD")  # HEAD: aiohttp sends the GET answer's head without its body
IDLE_TIMEOUT_SECONDS = 10.0  # the daemons' read timeout (gpufleet.http, dcgm-exporter's)
# (namespace, metric, selector) -> the matching items, one per workload.
Lookup = Callable[[str, str, tuple[Requirement, ...]], Awaitable[em.Matched]]


def from_feed(feed: em.SnapshotFeed) -> Lookup:
    """Answers from the controller's newest snapshot: what the daemon serves."""

    async def lookup(namespace: str, metric: str, selector: tuple[Requirement, ...]):
        return feed.latest.select(namespace, metric, selector)

    return lookup


def read_auth_config(api: client.ApiClient) -> RequestHeaderConfig:
    """The request-header settings kube-apiserver publishes. Raises ValueError naming what
    is missing (`AuthConfigError` is one)."""
    core = client.CoreV1Api(api)
    try:
        cm = kube_call(lambda: core.read_namespaced_config_map(CONFIGMAP, NAMESPACE))
    except KubeError as err:
        raise ValueError(f"cannot read ConfigMap {NAMESPACE}/{CONFIGMAP}: {err}") from None
    return parse_config(cm.data or {})


class AuthSource:
    """The request-header settings, read at start (raising ValueError, as
    `read_auth_config`) and again by `refresh`, as k8s.io/apiserver's dynamic CA
    controller follows the ConfigMap: a rotated front-proxy CA or a new allowed name is
    taken without a restart. A read that fails keeps the last settings, logged once until
    one succeeds."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self.current = read_auth_config(api)
        self._failing = False

    def refresh(self) -> None:
        """Read the ConfigMap again (blocking: run it on a thread)."""
        try:
            config = read_auth_config(self._api)
        except Exception as err:  # a token the client cannot refresh, too: never the loop's end
            if not self._failing:
                log.warning("keeping the last request-header settings: %s", err)
            self._failing = True
            return
        if self._failing:
            log.info("request-header settings read again")
        self._failing = False
        if config != self.current:
            log.info("request-header settings changed in %s/%s", NAMESPACE, CONFIGMAP)
            self.current = config


def tls_context(cert_file: str, key_file: str, auth: AuthSource) -> ssl.SSLContext:
    """Server TLS that asks for a client certificate and verifies it against the
    request-header CA; one without a certificate still connects (and gets a 401). It
    follows the certificate files and the CA (`tls_reload`). Raises ValueError naming the
    file that cannot be loaded."""

    def build() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"cannot load {cert_file} / {key_file}: {err}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cadata=auth.current.client_ca)
        return ctx

    return ReloadingContext(build, (cert_file, key_file), state=lambda: auth.current).context


class Authorizer:
    """SubjectAccessReviews with kube's delegating-authorizer cache."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.AuthorizationV1Api(api)
        self._cache: dict[Any, tuple[bool, float]] = {}

    async def allowed(
        self, user: UserInfo, attributes: Mapping[str, str], *, resource: bool
    ) -> bool:
        """Raises KubeError when the review cannot be made."""
        key = (user, tuple(sorted(attributes.items())), resource)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        body = access_review(user, attributes, resource=resource)
        answer = await asyncio.to_thread(
            kube_call, lambda: self._api.create_subject_access_review(body)
        )
        allowed = bool(answer.status and answer.status.allowed)
        if len(self._cache) > 10_000:  # users x metrics is small; never let it grow unbounded
            self._cache.clear()
        self._cache[key] = (allowed, now + (ALLOW_TTL_SECONDS if allowed else DENY_TTL_SECONDS))
        return allowed


def make_app(
    lookup: Lookup,
    auth: AuthSource,
    authorizer: Authorizer,
    *,
    window_seconds: int | None,
) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        if request.path in ALWAYS_ALLOW_PATHS and request.method in _METHODS:
            return web.Response(text="ok")
        user = _authenticate(request, auth.current)
        if user is None:
            return _status(401, "Unauthorized", "Unauthorized")
        segments = tuple(s for s in request.path.split("/") if s)
        metric_request = segments[:4] == _METRIC_PREFIX and len(segments) == 6
        if metric_request:
            namespace, metric = segments[4], segments[5]
            attrs = resource_attributes(namespace, metric, em.GROUP, em.VERSION)
        else:
            attrs = {"path": request.path, "verb": "get"}
        try:
            allowed = ALWAYS_ALLOW_GROUP in user.groups or await authorizer.allowed(
                user, attrs, resource=metric_request
            )
        except KubeError as err:
            log.warning("SubjectAccessReview failed: %s", err)
            return _status(500, "InternalError", "authorization failed: the review did not run")
        if not allowed:
            return _status(
                403, "Forbidden", forbidden_message(user, attrs, resource=metric_request)
            )
        if request.method not in _METHODS:
            response = _status(405, "MethodNotAllowed", f"method {request.method} is not allowed")
            response.headers["Allow"] = ", ".join(_METHODS)
            return response
        if segments == ("apis",):
            return web.json_response(em.group_list())
        if segments == ("apis", em.GROUP, em.VERSION):
            return web.json_response(em.resource_list())
        if not metric_request:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if metric not in em.METRICS:
            return _status(404, "NotFound", f'the server could not find the metric "{metric}"')
        try:
            selector = parse_selector(request.query.get("labelSelector", ""))
        except SelectorError as err:
            return _status(400, "BadRequest", f"labelSelector: {err}")
        matched = await lookup(namespace, metric, selector)
        return web.json_response(em.value_list(metric, matched, window_seconds=window_seconds))

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _authenticate(request: web.Request, config: RequestHeaderConfig) -> UserInfo | None:
    """The user the verified proxy certificate vouches for; None when unauthenticated."""
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    if not peer:  # no certificate (the CA verified any that was sent, in the handshake)
        return None
    common_name = next(
        (value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"),
        "",
    )
    if not name_allowed(config, common_name):
        return None
    headers: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        headers.setdefault(key.lower(), []).append(value)
    return user_from_headers(config, headers)


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(em.status(code, reason, message), status=code)


class Serving:
    """The listening server; `cleanup` stops it (the name aiohttp's runner has)."""

    def __init__(self, server: asyncio.Server, runner: web.AppRunner) -> None:
        self._server, self._runner = server, runner

    async def cleanup(self) -> None:
        self._server.close()
        await self._server.wait_closed()
        await self._runner.cleanup()


async def serve(app: web.Application, host: str | None, port: int, tls: ssl.SSLContext) -> Serving:
    """Start serving; raises OSError when the address cannot be bound."""
    # aiohttp's keep-alive timer runs from the connection's start and closes it while no
    # request is complete: an idle connection and a half-sent head alike. Before that, the
    # TLS handshake gets as long (asyncio's default is 60 s; aiohttp's site cannot set it).
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=IDLE_TIMEOUT_SECONDS)
    await runner.setup()
    try:
        server = await asyncio.get_running_loop().create_server(
            runner.server, host, port, ssl=tls, ssl_handshake_timeout=IDLE_TIMEOUT_SECONDS
        )
    except OSError:
        await runner.cleanup()
        raise
    log.info("serving %s on https://%s:%d", em.GROUP_VERSION, host or "*", port)
    return Serving(server, runner)
