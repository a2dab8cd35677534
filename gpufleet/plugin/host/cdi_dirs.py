"""CDI spec directories (`--cdi-spec-dirs`): the specs installed there, and ours.

A spec the operator installed (e.g. `nvidia-ctk cdi generate`'s, which knows more of the
driver than ours: see `core.cdi_driver`) always wins over the one the plugin generates: ours is
written only where no other spec of its kind exists, and a stale one of ours is removed
when one does, since two specs defining the same device names conflict in the runtime's
CDI registry.

Ours is written atomically into the first directory: a temporary file the CDI registry
ignores (not `.json`/`.yaml`) renamed over the old one, so a runtime reading the
directory never sees a partial spec. It must never touch a file it did not write.
"""

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpufleet.plugin.core.cdi import Spec, render
from gpufleet.plugin.host.atomic_file import write_atomically

log = logging.getLogger(__name__)

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
GENERATED_PREFIX = "gpufleet-"


class CdiError(Exception):
    """A spec could not be written; the message names the file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InstalledSpec:
    """Where the spec of one kind comes from."""

    kind: str
    path: Path
    generated: bool  # True: written by this plugin; False: the operator's, left alone


def generated_name(kind: str) -> str:
    """Our file name for a kind: `gpufleet-k8s.device-plugin.nvidia.com-gpu.json`."""
    return f"{GENERATED_PREFIX}{kind.replace('/', '-')}.json"


def spec_kinds(directories: Iterable[Path]) -> dict[Path, str]:
    """Spec file -> its `kind`, for every readable YAML or JSON spec; unreadable files are
    logged and skipped, missing directories are empty."""
    kinds: dict[Path, str] = {}
    for directory in directories:
        for path in sorted(directory.glob("*")) if directory.is_dir() else ():
            if path.suffix not in SPEC_SUFFIXES:
                continue
            try:
                spec = yaml.safe_load(path.read_text())
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                log.warning("skipping CDI spec %s: %s", path, exc)
                continue
            if isinstance(spec, dict) and isinstance(spec.get("kind"), str):
                kinds[path] = spec["kind"]
    return kinds


def install(specs: Sequence[Spec], directories: Sequence[Path]) -> list[InstalledSpec]:
    """Make each spec's kind resolvable: keep an operator's spec of that kind, else write
    ours to `directories[0]`. Raises CdiError naming the file it could not write or remove,
    ValueError if `directories` is empty."""
    if not directories:
        raise ValueError("no CDI spec directory to write to")
    found = spec_kinds(directories)
    installed = []
    for spec in specs:
        kind = spec["kind"]
        name = generated_name(kind)
        ours = directories[0] / name
        theirs = sorted(p for p, k in found.items() if k == kind and p.name != name)
        # Ours from an earlier run: in another directory, or anywhere once theirs exists.
        for path in (d / name for d in directories):
            if theirs or path != ours:
                _remove(path)
        if theirs:
            installed.append(InstalledSpec(kind=kind, path=theirs[0], generated=False))
            continue
        _write_atomically(ours, render(spec))
        installed.append(InstalledSpec(kind=kind, path=ours, generated=True))
    return installed


def _write_atomically(path: Path, text: str) -> None:
    try:
        write_atomically(path, text)
    except OSError as exc:
        raise CdiError(f"{path}: cannot write the CDI spec: {exc}") from None


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise CdiError(f"{path}: cannot remove our stale CDI spec: {exc}") from None
