"""`mig_profiles`: NVIDIA's MIG profile names from NVML's names, never from memory sizes."""

import pytest

from gpufleet.nvml.mig_profiles import mig_profile_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MIG 1g.10gb", "1g.10gb"),
        ("MIG 1g.12gb", "1g.12gb"),  # H100 NVL: dcgm-exporter #544 derived 1g.11gb
        ("MIG 3g.40gb+me", "3g.40gb+me"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA H100 80GB HBM3", None),
        ("MIG", None),
        ("NVIDIA H100NVLMIG 1g.12gb", None),
    ],
    ids=[
        "profile-info",
        "h100-nvl-issue-544",
        "media-extension",
        "device-name",
        "no-mig",
        "bare-word",
        "glued",
    ],
)
def test_mig_profile_name(name: str, expected: str | None) -> None:
    assert mig_profile_name(name) == expected
