"""Regenerate the committed gRPC stubs from the .proto files: each `<pkg>/proto/` into
`<pkg>/api/`, for the kubelet's APIs (gpufleet/kubelet) and KEDA's external scaler
(gpufleet/autoscaler/kedascaler).

The stubs are committed so that installing gpufleet needs no protoc; this script is the only
way they are written, and tests/kubelet/test_stubs_current.py fails when they drift from
the .proto files. Run it after editing a .proto:

    python scripts/gen_protos.py            # rewrite the committed stubs
    python scripts/gen_protos.py --out DIR  # write DIR/<pkg>/api/... instead

Why the staging copy: protoc names a generated module after the .proto's include-relative
path, and the grpc plugin writes `import <that path>_pb2`. Copying each .proto to
`<stage>/<pkg>/api/<name>.proto` and including `<stage>` makes every generated import
package-qualified (`from gpufleet.kubelet.api import podresources_v1_pb2`), so no text is
post-processed. The file name recorded in each descriptor is therefore
`<pkg>/api/<name>.proto`; the wire never sees it (RPC paths come from the package and
service names).

Output is deterministic: same .proto bytes and same pinned grpcio-tools give the same files.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
# The packages with protocol files: <pkg>/proto/*.proto -> <pkg>/api/.
PACKAGES = (Path("gpufleet", "kubelet"), Path("gpufleet", "autoscaler", "kedascaler"))
# The committed stubs are only valid for this generator; a different one changes the output.
GRPCIO_TOOLS_VERSION = "1.85.1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generated_names(package: Path) -> list[str]:
    """The file names the generator writes into `package`/api, sorted."""
    stems = sorted(p.stem for p in (REPO_ROOT / package / "proto").glob("*.proto"))
    return [stem + suffix for stem in stems for suffix in GENERATED_SUFFIXES]


def generate(out_root: Path) -> list[Path]:
    """Write every package's stubs under `out_root/<pkg>/api/` and return their paths.

    Raises RuntimeError when grpcio-tools is not the pinned version or protoc fails.
    """
    installed = version("grpcio-tools")
    if installed != GRPCIO_TOOLS_VERSION:
        raise RuntimeError(
            f"grpcio-tools {installed} is installed; the stubs are pinned to "
            f"{GRPCIO_TOOLS_VERSION} (pip install grpcio-tools=={GRPCIO_TOOLS_VERSION})"
        )
    written = []
    for package in PACKAGES:
        _generate_package(out_root, package)
        written += [out_root / package / "api" / name for name in generated_names(package)]
    return written


def _generate_package(out_root: Path, package: Path) -> None:
    proto_dir, api_package = REPO_ROOT / package / "proto", package / "api"
    protos = sorted(proto_dir.glob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files in {proto_dir}")
    with tempfile.TemporaryDirectory(prefix="gpufleet-protos-") as tmp:
        stage = Path(tmp)
        (stage / api_package).mkdir(parents=True)
        staged = []
        for proto in protos:
            shutil.copyfile(proto, stage / api_package / proto.name)
            staged.append((api_package / proto.name).as_posix())
        (out_root / api_package).mkdir(parents=True, exist_ok=True)
        args = [
            "grpc_tools.protoc",
            f"--proto_path={stage}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            *staged,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {', '.join(p.name for p in protos)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT,
        help="root to write each <pkg>/api/ under (default: the repository)",
    )
    args = parser.parse_args(argv)
    try:
        written = generate(args.out)
    except RuntimeError as exc:
        print(f"gen_protos: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
