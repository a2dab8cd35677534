"""`-d/--devices` end to end: which entities the running exporter reports on a node with
whole GPUs and a MIG-enabled GPU (the `node` fixture: GPUs 0-3 whole, GPU 4 in 7 slices)."""

import socket
import threading

import pytest
from helpers import wait_for
from helpers.e2e import RunningExporter, node_settings
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.exporter.daemon import StartupError

WHOLE = {(str(g), None) for g in range(4)}
MIG_PARENT = {("4", None)}


def entities(text: str) -> set[tuple[str, str | None]]:
    """(gpu, GPU_I_ID or None) of every entity with an FB_USED series."""
    return {
        (s.labels["gpu"], s.labels.get("GPU_I_ID"))
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "DCGM_FI_DEV_FB_USED"
    }


def slices(node) -> set[tuple[str, str | None]]:
    return {(str(gpu.index), str(m.gi_id)) for gpu in node.sim.devices for m in gpu.mig}


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ("f", lambda node: WHOLE | slices(node)),
        ("g", lambda node: WHOLE | MIG_PARENT),
        ("i", slices),
        ("g:1,4", lambda node: {("1", None), ("4", None)}),
        ("i:29-30", lambda node: set(sorted(slices(node), key=lambda s: int(s[1]))[1:3])),
    ],
    ids=[
        "flex-default-mig-parents-keep-only-whole-gpu-fields",
        "g-whole-gpus-including-mig-parents",
        "i-mig-instances-only",
        "g-with-a-range",
        "i-range-names-dcgm-ids-gpu-4-of-7-slots-from-28",
    ],
)
def test_devices_selects_the_reported_entities(node, exporter_for, devices, expected):
    exporter = exporter_for(node, devices=devices)
    want = expected(node)
    assert len(want) > 1
    wait_for(lambda: entities(exporter.metrics()) == want, what=f"entities of -d {devices}")
    # Under flex the MIG parent is an entity too: it serves its whole-GPU fields only.
    count = len(want) + (devices == "f")
    assert f"\ngpufleet_exporter_entities {count}\n" in exporter.metrics()


@pytest.mark.parametrize(
    ("devices", "problem"),
    [
        (
            "g:0-99",
            "--devices 'g:0-99': couldn't find requested GPU ID '5' "
            "(missing: 5-99; GPUs on this node: 0-4)",
        ),
        (
            "i:0-4",
            "--devices 'i:0-4': couldn't find requested GPU instance ID '0' "
            "(missing: 0-4; DCGM GPU instance IDs on this node: 28-34)",
        ),
    ],
    ids=["issue 15: past the last GPU", "issue 15: GPU indexes are not DCGM instance ids"],
)
def test_a_range_naming_what_the_node_lacks_stops_startup(node, devices, problem):
    exporter = RunningExporter(node_settings(node, devices=devices), node.sim)
    with pytest.raises(RuntimeError, match="exporter did not start"):
        exporter.start()
    assert isinstance(exporter._error, StartupError) and problem in str(exporter._error)
    exporter._thread.join(15)
    # The discovery behind the check started the XID watcher; the refusal stopped it.
    assert not [t for t in threading.enumerate() if t.name == "xid-watcher"]


def test_a_busy_port_leaves_no_watcher_running(node):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = node_settings(node, address=f"127.0.0.1:{taken.getsockname()[1]}")
        exporter = RunningExporter(settings, node.sim)
        with pytest.raises(RuntimeError, match="exporter did not start"):
            exporter.start()
    exporter._thread.join(15)
    assert isinstance(exporter._error, StartupError)
    assert str(exporter._error).startswith(f"--address {settings.address}: ")
    assert not exporter._error.nvml_in_use
    assert not [t for t in threading.enumerate() if t.name == "xid-watcher"]


def test_startup_given_up_under_a_hung_xid_wait_leaves_nvml_initialised(node):
    """The refusal's stop of the XID watcher found its wait hung: NVML is still in use, and
    the daemon must not shut it down. Startup's error paths ignored that answer."""
    node.sim.set_hang("nvmlEventSetWait_v2", 6.0)
    try:
        exporter = RunningExporter(node_settings(node, devices="g:0-99"), node.sim)
        with pytest.raises(RuntimeError, match="exporter did not start"):
            exporter.start()
        exporter._thread.join(15)
        assert isinstance(exporter._error, StartupError) and exporter._error.nvml_in_use
    finally:
        node.sim.set_hang("nvmlEventSetWait_v2", 0)
        wait_for(
            lambda: not [t for t in threading.enumerate() if t.name == "xid-watcher"],
            timeout=15,
            what="the hung wait to end",
        )
