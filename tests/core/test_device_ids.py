"""Device IDs and NVIDIA's `<id>::<n>` replica suffix: one spelling for plugin, exporter, lab."""

import pytest

from gpufleet.core.device_ids import base_id, is_replica, replica_id, split_replica

GPU = "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"
MIG = "MIG-5f0bbd8f-7a9c-5b1e-8d4e-6f1a2b3c4d5e"


@pytest.mark.parametrize(
    ("device_id", "split"),
    [
        pytest.param(GPU, (GPU, None), id="whole-gpu"),
        pytest.param(f"{GPU}::0", (GPU, 0), id="gpu-replica-0"),
        pytest.param(f"{MIG}::17", (MIG, 17), id="mig-replica"),
        pytest.param("nvidia0/vgpu1", ("nvidia0/vgpu1", None), id="gke-form-is-not-ours"),
        pytest.param(f"{GPU}::x", None, id="suffix-not-a-number"),
        pytest.param(f"{GPU}::", None, id="empty-suffix"),
        pytest.param(f"{GPU}::٣", None, id="non-ascii-digit"),
    ],
)
def test_split_replica(device_id: str, split: tuple[str, int | None] | None) -> None:
    assert split_replica(device_id) == split


def test_replica_id_round_trips() -> None:
    rid = replica_id(MIG, 3)
    assert rid == f"{MIG}::3"
    assert is_replica(rid) and not is_replica(MIG)
    assert base_id(rid) == MIG and base_id(MIG) == MIG
    assert split_replica(rid) == (MIG, 3)
