"""Node Feature Discovery's local feature file: how the plugin's GFD labels reach the Node.

NFD's worker reads every file in `features.d/` (`name=value` lines) and its master puts
the labels on the Node; GFD publishes the same way (its file is `features.d/gfd`). Ours has
its own name, so the two never overwrite each other while a cluster moves from GFD.
"""

from collections.abc import Mapping
from pathlib import Path

from gpufleet.plugin.core.labels import render_features
from gpufleet.plugin.host.atomic_file import write_atomically

DEFAULT_FEATURES_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gpufleet-plugin"


def write_features(path: Path, labels: Mapping[str, str]) -> bool:
    """Atomically write `labels` to `path`. Returns False, writing nothing, when the
    features.d directory does not exist (NFD is not installed or not mounted): creating it
    would publish to nobody. Raises OSError for any other failure."""
    if not path.parent.is_dir():
        return False
    write_atomically(path, render_features(labels), create_parent=False)
    return True
