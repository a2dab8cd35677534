"""NFD's feature file: written atomically into an existing features.d, never created."""

from pathlib import Path

import pytest

from gpufleet.plugin.host.nfd_features import write_features


def test_writes_name_value_lines_atomically(tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "gpufleet-plugin"
    path.parent.mkdir()
    path.write_text("nvidia.com/stale=1\n")
    assert write_features(path, {"nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true"})
    assert path.read_text() == "nvidia.com/gpu.count=8\nnvidia.com/mig.capable=true\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["gpufleet-plugin"]


def test_missing_features_dir_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "gpufleet-plugin"
    assert write_features(path, {"a/b": "c"}) is False
    assert not path.parent.exists()


def test_unwritable_target_raises_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "gpufleet-plugin"
    path.mkdir(parents=True)  # a directory where the file should be: the rename fails
    with pytest.raises(OSError):
        write_features(path, {"a/b": "c"})
    assert sorted(p.name for p in path.parent.iterdir()) == ["gpufleet-plugin"]
