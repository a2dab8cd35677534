"""`-d/--devices` end to end: which entities the running exporter reports on a node with
whole GPUs and a MIG-enabled GPU (the `node` fixture: GPUs 0-3 whole, GPU 4 in 7 slices)."""

import pytest
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

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
    ],
    ids=[
        "flex-default-drops-mig-parents",
        "g-whole-gpus-including-mig-parents",
        "i-mig-instances-only",
        "g-with-a-range",
    ],
)
def test_devices_selects_the_reported_entities(node, exporter_for, devices, expected):
    exporter = exporter_for(node, devices=devices)
    want = expected(node)
    assert len(want) > 1
    wait_for(lambda: entities(exporter.metrics()) == want, what=f"entities of -d {devices}")
    assert f"\ngpufleet_exporter_entities {len(want)}\n" in exporter.metrics()
