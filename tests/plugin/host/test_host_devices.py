"""`host_devices`: MIG capability minors from the driver's mig-minors file, and IMEX
channels found (or required) the way NVIDIA's plugin looks for them, on real files."""

import os
from pathlib import Path

import pytest
from helpers.plugin_node import gpu, node
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.plugin.host.host_devices import (
    ImexError,
    imex_channels,
    parse_mig_minors,
    read_mig_minors,
    with_cap_minors,
)

# The format the driver writes (NVIDIA MIG user guide, "/dev based nvidia-capabilities").
MIG_MINORS = """\
config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu1/gi1/access 111
"""


def test_parse_mig_minors_keeps_access_lines_only() -> None:
    assert parse_mig_minors(MIG_MINORS) == {
        (0, 1, None): 12,
        (0, 1, 0): 13,
        (0, 2, None): 21,
        (0, 2, 0): 22,
        (1, 1, None): 111,
    }


def test_read_mig_minors_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_mig_minors(tmp_path / "absent") == {}
    (tmp_path / "mig-minors").write_text(MIG_MINORS)
    assert read_mig_minors(tmp_path / "mig-minors")[(0, 1, 0)] == 13


@pytest.mark.parametrize(
    ("minors", "expected"),
    [
        pytest.param({(0, 7, None): 12, (0, 7, 0): 13}, (12, 13), id="GI and CI listed"),
        pytest.param({(0, 8, None): 12, (0, 8, 0): 13}, (), id="another GPU instance"),
        pytest.param({(1, 7, None): 12, (1, 7, 0): 13}, (), id="another GPU minor"),
        pytest.param({(0, 7, None): 12}, (), id="CI missing: neither"),
    ],
)
def test_with_cap_minors_matches_gpu_minor_gi_and_ci(minors, expected) -> None:
    base = node(gpu(0, profiles=("1g.10gb",)))  # minor 0; its MIG device is GI 7, CI 0
    (mig,) = with_cap_minors(base, minors).gpus[0].migs
    assert mig.cap_minors == expected


def channel(root: Path) -> Path:
    """A character device at root's IMEX channel 0 path (a link to /dev/null)."""
    path = root / "dev/nvidia-caps-imex-channels/channel0"
    path.parent.mkdir(parents=True)
    os.symlink("/dev/null", path)
    return path


def test_a_channel_under_the_container_driver_root_is_found(tmp_path: Path) -> None:
    channel(tmp_path)
    assert imex_channels([0], required=True, container_driver_root=tmp_path) == ("0",)


def test_no_channels_configured_finds_none(tmp_path: Path) -> None:
    assert imex_channels([], required=True, container_driver_root=tmp_path) == ()


def test_a_missing_channel_is_skipped_unless_required(tmp_path: Path) -> None:
    assert imex_channels([0], required=False, container_driver_root=tmp_path) == ()
    with pytest.raises(ImexError, match="requested IMEX channel channel0 does not exist"):
        imex_channels([0], required=True, container_driver_root=tmp_path)


def test_a_regular_file_is_not_a_channel(tmp_path: Path) -> None:
    path = tmp_path / "dev/nvidia-caps-imex-channels/channel0"
    path.parent.mkdir(parents=True)
    path.write_text("")
    with pytest.raises(ImexError, match=str(path)):
        imex_channels([0], required=True, container_driver_root=tmp_path)


_NUMBER = st.integers(0, 9999).map(str) | st.integers(10, 6000).map(lambda n: "9" * n)


@given(
    st.lists(
        st.text(max_size=40)
        | st.tuples(_NUMBER, _NUMBER, _NUMBER).map(lambda t: "gpu{}/gi{}/access {}".format(*t)),
        max_size=6,
    ).map("\n".join)
)
def test_any_mig_minors_text_parses(text: str) -> None:
    """The driver's file, whatever it holds: lines that are no access line are ignored
    (a minor of thousands of digits raised int()'s ValueError)."""
    assert all(minor < 10**9 for minor in parse_mig_minors(text).values())
