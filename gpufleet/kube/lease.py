"""Lease-based leader election (coordination.k8s.io/v1), with client-go's semantics.

Defaults are client-go's: a 15 s lease, a 10 s renew deadline, a 2 s retry period. The
holder renews every retry period; a candidate takes the lease once the record it last saw
has not changed for a lease duration (judged on its own monotonic clock, as client-go does,
so clock skew between nodes does not matter). `is_leader` turns False as soon as the
holder has gone a renew deadline without a successful renewal, which is before any other
candidate may take over: a lost lease stops writes before another holder can start.

The campaign never ends but by cancelling: an attempt that fails in any way (an answer
that is no Lease included) is a failed renewal, logged as an outage, and the next retry
period tries again. It runs on a thread of its own, not the default pool, which writes
held by a hung admission webhook can fill past the renew deadline.
"""

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client

from gpufleet.kube.errors import KubeError, KubeErrorKind, kube_call
from gpufleet.kube.events import MicroTime, micro_time
from gpufleet.logs import OutageLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0


class LeaderElector:
    """Campaigns for one Lease; `run` until cancelled, `is_leader` at any time."""

    def __init__(
        self,
        api: client.ApiClient,
        config: LeaseConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not config.renew_deadline_seconds < config.lease_duration_seconds:
            raise ValueError("the renew deadline must be shorter than the lease duration")
        self._leases = client.CoordinationV1Api(api)
        self._config = config
        self._clock = clock
        self._wall = wall_clock
        self._renewed_at = -float("inf")  # last successful acquire or renew (monotonic)
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = -float("inf")
        self.transitions = 0  # times this candidate became leader
        # One attempt at a time: `release` waits for a renewal in flight (cancelling
        # `run` does not stop its thread), which would otherwise write after it.
        self._attempt = threading.Lock()
        self._released = False
        # Each call within the renew deadline, as client-go bounds a renewal: a hung API
        # server must hold neither the campaign nor the release past it.
        self._timeout = {"_request_timeout": config.renew_deadline_seconds}
        self._outage = OutageLog(log, f"lease {config.namespace}/{config.name}")

    def is_leader(self) -> bool:
        return self._clock() - self._renewed_at < self._config.renew_deadline_seconds

    async def run(self) -> None:
        """Try to acquire or renew every retry period, forever (cancel to stop)."""
        loop = asyncio.get_running_loop()
        own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufleet-lease")
        try:
            while True:
                await loop.run_in_executor(own, self._campaign_once)
                await asyncio.sleep(self._config.retry_period_seconds)
        finally:  # not waited for here: `release` waits for a renewal in flight
            own.shutdown(wait=False)

    def _campaign_once(self) -> None:
        try:
            self.try_acquire_or_renew()
        except Exception as err:  # a bug, or an answer no check foresaw: tried again
            self._outage.raised(err)

    def release(self) -> None:
        """Give the lease up on shutdown so another candidate need not wait it out; no
        attempt to take or renew it runs after."""
        self._released = True
        if not self._attempt.acquire(timeout=self._config.renew_deadline_seconds):
            # The renewal in flight is stuck past its own deadline: the lease lapses alone.
            c = self._config
            log.warning("lease %s/%s not released: a renewal is stuck", c.namespace, c.name)
            return
        try:
            if self.is_leader():
                self._give_up()
            self._renewed_at = -float("inf")
        finally:
            self._attempt.release()

    def _give_up(self) -> None:
        c = self._config
        try:
            lease = self._get()
            if lease.spec is not None and lease.spec.holder_identity == c.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                self._put(lease)
        except KubeError as err:
            log.warning("could not release lease %s/%s: %s", c.namespace, c.name, err)

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the lease afterwards (never once
        `release` has begun)."""
        with self._attempt:
            return not self._released and self._attempt_once()

    def _attempt_once(self) -> bool:
        c = self._config
        now, wall = self._clock(), self._wall()
        try:
            lease = self._get()
        except KubeError as err:
            if err.kind is not KubeErrorKind.NOT_FOUND:
                self._outage.failed(f"unreadable: {err}", kind=f"read {err.kind}")
                return self.is_leader()
            return self._create(now, wall)
        if lease.spec is None:  # a Lease with no spec is held by no one
            lease.spec = client.V1LeaseSpec()
        spec = lease.spec
        record = (spec.holder_identity or "", str(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.holder_identity or ""
        expired = now - self._observed_at >= (spec.lease_duration_seconds or 0)
        if holder and holder != c.identity and not expired:
            self._outage.recovered()
            return False
        if holder != c.identity:
            spec.acquire_time = micro_time(wall)
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = c.identity
        spec.lease_duration_seconds = _whole_seconds(c.lease_duration_seconds)
        spec.renew_time = micro_time(wall)
        try:
            self._put(lease)
        except KubeError as err:
            if err.kind is not KubeErrorKind.CONFLICT:
                self._outage.failed(f"not renewed: {err}", kind=f"write {err.kind}")
            return self.is_leader()
        return self._won(now, holder)

    def _create(self, now: float, wall: float) -> bool:
        c = self._config
        body = {
            "metadata": {"name": c.name, "namespace": c.namespace},
            "spec": {
                "holderIdentity": c.identity,
                "leaseDurationSeconds": _whole_seconds(c.lease_duration_seconds),
                "acquireTime": micro_time(wall),
                "renewTime": micro_time(wall),
                "leaseTransitions": 0,
            },
        }
        try:
            kube_call(
                lambda: self._leases.create_namespaced_lease(c.namespace, body, **self._timeout)
            )
        except KubeError as err:
            if err.kind is not KubeErrorKind.CONFLICT:
                self._outage.failed(f"not created: {err}", kind=f"create {err.kind}")
            return False  # someone else created it first; the next try reads theirs
        return self._won(now, "")

    def _get(self) -> client.V1Lease:
        c = self._config
        return kube_call(
            lambda: self._leases.read_namespaced_lease(c.name, c.namespace, **self._timeout)
        )

    def _put(self, lease: client.V1Lease) -> None:
        c = self._config
        spec = lease.spec
        for name in ("acquire_time", "renew_time"):  # as read back: plain datetimes
            if isinstance(value := getattr(spec, name), datetime):
                setattr(spec, name, MicroTime.of(value))
        kube_call(
            lambda: self._leases.replace_namespaced_lease(
                c.name, c.namespace, lease, **self._timeout
            )
        )

    def _won(self, now: float, previous_holder: str) -> bool:
        self._outage.recovered()
        if previous_holder != self._config.identity and not self.is_leader():
            self.transitions += 1
            log.info("became leader (lease %s/%s)", self._config.namespace, self._config.name)
        self._renewed_at = now
        return True


def _whole_seconds(seconds: float) -> int:
    """The Lease's `leaseDurationSeconds`, an int32 the API server wants above 0: a
    duration under a second rounded down to 0 was refused, and no replica ever led."""
    return max(1, math.ceil(seconds))
