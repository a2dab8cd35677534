"""`either_profile`: PromQL that reads a field from an exporter serving either profile, in
the legacy unit (what the dashboards are generated with)."""

import pytest

from gpufleet.exporter.core.profiles import either_profile


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # renamed, same unit
        (
            "DCGM_FI_DEV_GPU_TEMP",
            '(DCGM_FI_DEV_GPU_TEMP{a="1"} or DCGM_FI_DEV_GPU_TEMP_CELSIUS{a="1"})',
        ),
        # renamed, a ratio back to percent
        (
            "DCGM_FI_DEV_GPU_UTIL",
            '(DCGM_FI_DEV_GPU_UTIL{a="1"} or 100 * DCGM_FI_DEV_GPU_UTIL_RATIO{a="1"})',
        ),
        # renamed, B/s back to MB/s
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            '(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{a="1"}'
            ' or DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL{a="1"} / 1000000)',
        ),
        # not renamed: its own selector
        ("DCGM_FI_DEV_FB_USED", '(DCGM_FI_DEV_FB_USED{a="1"})'),
    ],
)
def test_either_profile(name: str, expected: str) -> None:
    assert either_profile(name, '{a="1"}') == expected
