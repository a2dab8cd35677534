"""MIG geometry: what part of its GPU a MIG instance is, from NVIDIA's profile name."""

import pytest

from gpufleet.core.mig_geometry import mig_compute_fraction


@pytest.mark.parametrize(
    ("profile", "fraction"),
    [
        ("1g.10gb", 1 / 7),
        ("3g.40gb", 3 / 7),
        ("7g.80gb", 1.0),
        ("1g.18gb+me", 1 / 7),  # H200, media extensions
        ("2g.12gb", 2 / 4),  # A30: 4 compute slices
        ("4g.24gb", 1.0),
        ("weird", 1 / 7),  # unparsable: one slice, never 0
        ("0g.1gb", 1 / 7),
    ],
)
def test_mig_compute_fraction(profile: str, fraction: float) -> None:
    assert mig_compute_fraction(profile) == fraction
