"""`cdi_dirs` on real directories: ours is written atomically into the first directory, an
operator's spec of the kind wins and a stale one of ours goes, other files are never
touched, and a directory it cannot write is an error naming the file."""

import json
import os
from pathlib import Path

import pytest

from gpufleet.plugin.core.cdi import render
from gpufleet.plugin.host.cdi_dirs import (
    CdiError,
    InstalledSpec,
    generated_name,
    install,
    spec_kinds,
)

KIND = "k8s.device-plugin.nvidia.com/gpu"
OURS = "gpufleet-k8s.device-plugin.nvidia.com-gpu.json"
SPEC = {
    "cdiVersion": "0.5.0",
    "kind": KIND,
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
}


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "etc-cdi", tmp_path / "run-cdi"]


def test_our_name_is_derived_from_the_kind() -> None:
    assert generated_name(KIND) == OURS


def test_writes_ours_into_the_first_directory_creating_it(dirs) -> None:
    assert install([SPEC], dirs) == [InstalledSpec(kind=KIND, path=dirs[0] / OURS, generated=True)]
    path = dirs[0] / OURS
    assert path.read_text() == render(SPEC)
    assert json.loads(path.read_text()) == SPEC
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert sorted(p.name for p in dirs[0].iterdir()) == [OURS]  # no temporary file left
    assert not dirs[1].exists()


def test_rewrites_ours_on_the_next_start(dirs) -> None:
    install([SPEC], dirs)
    changed = {**SPEC, "devices": [*SPEC["devices"], {**SPEC["devices"][0], "name": "1"}]}
    install([changed], dirs)
    assert json.loads((dirs[0] / OURS).read_text()) == changed


@pytest.mark.parametrize("operator_dir", [0, 1], ids=["same-dir", "other-dir"])
def test_an_operator_spec_of_the_kind_wins_and_our_stale_one_goes(dirs, operator_dir) -> None:
    install([SPEC], dirs)
    theirs = dirs[operator_dir] / "nvidia.yaml"
    theirs.parent.mkdir(parents=True, exist_ok=True)
    theirs.write_text(f"cdiVersion: 0.5.0\nkind: {KIND}\ndevices: []\n")
    assert install([SPEC], dirs) == [InstalledSpec(kind=KIND, path=theirs, generated=False)]
    assert not (dirs[0] / OURS).exists()
    assert theirs.read_text() == f"cdiVersion: 0.5.0\nkind: {KIND}\ndevices: []\n"


def test_specs_of_other_kinds_and_other_files_are_left_alone(dirs) -> None:
    dirs[0].mkdir()
    toolkit = dirs[0] / "nvidia.yaml"
    toolkit.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    notes = dirs[0] / "README"
    notes.write_text("not a spec")
    install([SPEC], dirs)
    assert toolkit.read_text() == "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"
    assert notes.read_text() == "not a spec"
    assert spec_kinds(dirs) == {dirs[0] / OURS: KIND, toolkit: "nvidia.com/gpu"}


def test_ours_moves_to_the_first_directory(dirs) -> None:
    install([SPEC], dirs[1:])  # an earlier run with another --cdi-spec-dirs
    install([SPEC], dirs)
    assert (dirs[0] / OURS).exists()
    assert not (dirs[1] / OURS).exists()


def test_an_unreadable_spec_is_skipped(dirs) -> None:
    dirs[0].mkdir()
    (dirs[0] / "broken.yaml").write_text("kind: [unclosed\n")
    assert spec_kinds(dirs) == {}


def test_a_directory_it_cannot_write_is_named(tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(CdiError, match=f"^{blocker / OURS}: cannot write the CDI spec"):
        install([SPEC], [blocker])
