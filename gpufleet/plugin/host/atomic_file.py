"""Writing a file other processes read while we may be rewriting it.

Readers (container runtimes, Node Feature Discovery) must see the old file or the new one,
never a part: write a temporary file beside it, then rename over it.
"""

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, text: str, *, create_parent: bool = True) -> None:
    """Replace `path` with `text`, readable by all (0644: readers run as other users).

    Raises OSError; the temporary file is then removed. With `create_parent` False a
    missing directory is an error (FileNotFoundError) instead of being created."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        if create_parent:
            path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
