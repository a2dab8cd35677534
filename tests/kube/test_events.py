"""Events as the API server validates them: a MicroTime with six fractional digits, a note
of at most 1024 bytes (the fake API server checks both, as kube-apiserver does)."""

from collections.abc import Iterator

import pytest
from helpers.kube import api_client
from kubernetes import client

from gpufleet.kube.events import EventRecorder
from gpufleet.lab.kubeapi.server import FakeApiServer

WHOLE_SECOND = 1_767_225_600.0  # 2026-01-01T00:00:00Z
POD = {"apiVersion": "v1", "kind": "Pod", "name": "vllm-0", "namespace": "default"}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


def events(api: client.ApiClient) -> list:
    return client.EventsV1Api(api).list_namespaced_event("default").items


def test_an_event_on_a_whole_second_is_made_and_counted(server) -> None:
    """The client writes a datetime with isoformat(), which drops a zero microsecond:
    metav1.MicroTime wants six digits, and such an Event (or its series) was refused."""
    now = [WHOLE_SECOND]
    with api_client(server.url) as api:
        recorder = EventRecorder(api, controller="c", instance="i", clock=lambda: now[0])
        recorder.record(regarding=POD, type_="Normal", reason="Scaled", action="Scale", note="to 2")
        now[0] += 1
        recorder.record(regarding=POD, type_="Normal", reason="Scaled", action="Scale", note="to 2")
        (made,) = events(api)
    assert made.event_time.timestamp() == WHOLE_SECOND
    assert made.series.count == 2


def test_a_note_is_cut_to_1024_bytes_not_characters(server) -> None:
    """A spec error quoting a user's non-ASCII value: 1024 characters of 2 bytes each were
    refused, and the bad spec was reported again every tick."""
    with api_client(server.url) as api:
        recorder = EventRecorder(api, controller="c", instance="i")
        recorder.record(
            regarding=POD, type_="Warning", reason="InvalidSpec", action="Read", note="é" * 900
        )
        (made,) = events(api)
    assert made.note == "é" * 512


def test_events_are_named_as_client_go_names_them(server) -> None:
    """`<regarding>.<UnixNano hex>` (client-go's makeEvent). The recorder sent a generateName
    of "<name>.", which kube-apiserver refuses (422) for ending in a dot: no Event was ever
    made on a real cluster. Two Events at one clock reading, and a regarding name at the
    253-character limit, still get valid names of their own."""
    long = {**POD, "name": "a" * 235 + "-b"}  # cut where the dash would end it
    with api_client(server.url) as api:
        recorder = EventRecorder(api, controller="c", instance="i", clock=lambda: WHOLE_SECOND)
        for reason in ("Scaled", "Held"):
            recorder.record(regarding=POD, type_="Normal", reason=reason, action="Scale", note="")
        recorder.record(regarding=long, type_="Normal", reason="Held", action="Scale", note="")
        names = sorted(e.metadata.name for e in events(api))
    ns = int(WHOLE_SECOND * 1e9)
    assert names[1:] == [f"vllm-0.{ns:x}", f"vllm-0.{ns + 1:x}"]
    assert len(names[0]) <= 253 and names[0].endswith(f".{ns + 2:x}")
