"""Leader election over the fake API server's real REST: client-go's semantics (a lease is
waited out on the candidate's own clock), and a release no renewal in flight can undo."""

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler

import pytest
from helpers import wait_for
from helpers.kube import api_client
from helpers.serving import serving
from kubernetes import client

from gpufleet.kube.lease import LeaderElector, LeaseConfig
from gpufleet.lab.kubeapi.server import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


def holder(api: client.ApiClient) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("lock", "default")
    return lease.spec.holder_identity or ""


def test_a_candidate_waits_the_lease_out_and_a_release_hands_it_over(server) -> None:
    now = [0.0]
    with api_client(server.url) as api:
        a, b = (
            LeaderElector(
                api,
                LeaseConfig(namespace="default", name="lock", identity=who),
                clock=lambda: now[0],
            )
            for who in ("a", "b")
        )
        assert a.try_acquire_or_renew() and a.is_leader()
        assert not b.try_acquire_or_renew()
        now[0] = 10.0  # a renews; b has seen no change for 10 s of a 15 s lease
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
        a.release()
        assert not a.is_leader() and holder(api) == ""
        assert b.try_acquire_or_renew() and holder(api) == "b"  # at once, not 15 s later
        assert not a.try_acquire_or_renew()  # released for good
        now[0] = 30.0  # b stopped renewing: after a whole lease, another takes it
        c = LeaderElector(
            api, LeaseConfig(namespace="default", name="lock", identity="c"), clock=lambda: now[0]
        )
        assert not c.try_acquire_or_renew()
        now[0] = 45.0
        assert c.try_acquire_or_renew() and holder(api) == "c"


def test_a_release_waits_for_the_renewal_in_flight(server) -> None:
    """Cancelling the campaign leaves its renewal running in a thread: released at the
    same moment, the renewal's write either took a 409 from the release (the lease kept
    by a process that had exited) or landed after it (taken back)."""
    with api_client(server.url) as api:
        a = LeaderElector(api, LeaseConfig(namespace="default", name="lock", identity="a"))
        assert a.try_acquire_or_renew()
        server.faults.delay_seconds = 0.3  # every request: the renewal stays in flight
        renewing = threading.Thread(target=a.try_acquire_or_renew)
        renewing.start()
        wait_for(a._attempt.locked, what="the renewal in flight")
        a.release()
        renewing.join(timeout=30)
        server.faults.delay_seconds = 0.0
        assert holder(api) == ""
        assert not a.is_leader() and not a.try_acquire_or_renew()


def test_a_lease_taken_on_a_whole_second_is_renewed(server) -> None:
    """The client writes the times it read back with isoformat(), which drops a zero
    microsecond; the API server parses metav1.MicroTime with six digits and refused every
    renewal of a lease acquired on a whole second."""
    now = [0.0]
    with api_client(server.url) as api:
        a = LeaderElector(
            api,
            LeaseConfig(namespace="default", name="lock", identity="a"),
            clock=lambda: now[0],
            wall_clock=lambda: 1_767_225_600.0 + now[0],  # 2026-01-01T00:00:00Z
        )
        assert a.try_acquire_or_renew()
        for second in (1.0, 2.0):
            now[0] = second
            assert a.try_acquire_or_renew() and a.is_leader()
        spec = client.CoordinationV1Api(api).read_namespaced_lease("lock", "default").spec
        assert spec.renew_time.timestamp() == 1_767_225_602.0


def test_a_lease_shorter_than_a_second_is_one_second_not_0(server) -> None:
    """leaseDurationSeconds is an int the API server wants above 0: int(0.5) was 0, the
    create was refused, and no replica ever led."""
    with api_client(server.url) as api:
        config = LeaseConfig(
            namespace="default",
            name="lock",
            identity="a",
            lease_duration_seconds=0.5,
            renew_deadline_seconds=0.4,
        )
        assert LeaderElector(api, config).try_acquire_or_renew()
        spec = client.CoordinationV1Api(api).read_namespaced_lease("lock", "default").spec
        assert spec.lease_duration_seconds == 1


def test_a_lease_without_a_spec_is_held_by_no_one(server) -> None:
    """A Lease made without a spec (it is optional): taken, not an AttributeError that
    ended the campaign for good."""
    with api_client(server.url) as api:
        leases = client.CoordinationV1Api(api)
        leases.create_namespaced_lease("default", {"metadata": {"name": "lock"}})
        a = LeaderElector(api, LeaseConfig(namespace="default", name="lock", identity="a"))
        assert a.try_acquire_or_renew() and holder(api) == "a"


class _NoLease(BaseHTTPRequestHandler):
    """A proxy's page where a Lease should be: 200, and not JSON."""

    asked = 0

    def do_GET(self) -> None:
        type(self).asked += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.wfile.write(b"<html>oops")

    def log_message(self, *args: object) -> None:
        pass


async def test_the_campaign_outlives_any_answer(caplog) -> None:
    """An answer that is no Lease fails that attempt alone, logged once as an outage: the
    campaign retries each period (it ended, and with it every future renewal)."""
    config = LeaseConfig(
        namespace="default",
        name="lock",
        identity="a",
        lease_duration_seconds=1.0,
        renew_deadline_seconds=0.5,
        retry_period_seconds=0.01,
    )
    with serving(_NoLease) as url, api_client(url) as api:
        campaign = asyncio.create_task(LeaderElector(api, config).run())
        while _NoLease.asked < 5 and not campaign.done():
            await asyncio.sleep(0.01)
        assert not campaign.done()
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign
    assert caplog.text.count("lease default/lock: JSONDecodeError") == 1


async def test_renewals_do_not_queue_behind_a_full_default_pool(server) -> None:
    """Writes held by a hung admission webhook fill asyncio's default pool; a renewal
    queued there waited past its deadline and the lease was lost to a standby."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    hung = threading.Event()
    held = loop.run_in_executor(None, hung.wait)
    config = LeaseConfig(namespace="default", name="lock", identity="a", retry_period_seconds=0.01)
    try:
        with api_client(server.url) as api:
            elector = LeaderElector(api, config)
            campaign = asyncio.create_task(elector.run())
            for _ in range(500):
                if elector.is_leader():
                    break
                await asyncio.sleep(0.01)
            campaign.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await campaign
            assert elector.is_leader()
    finally:
        hung.set()
        await held
