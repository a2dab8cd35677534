"""Publishing GFD's node labels: NFD's feature file and/or the Node object.

Labels are a side channel: scheduling on them matters, but a plugin that stopped
advertising GPUs over a label write would be worse. So a failure is one warning line and
the plugin serves on; the next start or config reload writes them again.
"""

import logging
from pathlib import Path

import urllib3
from kubernetes.client import ApiException

from gpufleet.core.label_values import is_label_value
from gpufleet.kube.connect import api_client
from gpufleet.kube.node_labels import apply_node_labels
from gpufleet.plugin.core.config import PluginConfig
from gpufleet.plugin.core.labels import MACHINE_UNKNOWN, gfd_labels
from gpufleet.plugin.core.model import NodeGpus
from gpufleet.plugin.host.nfd_features import write_features
from gpufleet.plugin.host.pci_class import SYSFS_PCI_DEVICES, pci_classes

log = logging.getLogger(__name__)
OWNER = "plugin"  # names the annotation listing the labels the plugin set on its Node


def publish_labels(
    node: NodeGpus,
    config: PluginConfig,
    *,
    features_file: str,
    node_name: str,
    machine_type_file: str = "",
    kube_url: str = "",
    kubeconfig: str = "",
    pci_devices: Path = SYSFS_PCI_DEVICES,
) -> dict[str, str]:
    """Write GFD's labels for `node` to `features_file` (if set) and onto the Node
    `node_name` (if set). Never raises; returns the labels."""
    labels = gfd_labels(
        node,
        config,
        machine=_machine_type(machine_type_file),
        pci_classes=_pci_classes(node, pci_devices),
    )
    if features_file:
        path = Path(features_file)
        try:
            if write_features(path, labels):
                log.info("GFD labels written for NFD: %s (%d labels)", path, len(labels))
            else:
                log.warning(
                    "%s: no such directory (is Node Feature Discovery installed?): GFD labels "
                    "not written; --node-labels-file '' stops trying",
                    path.parent,
                )
        except OSError as exc:
            log.warning("%s: cannot write GFD labels: %s", path, exc)
    if node_name:
        # NFD leaves off a label whose value it cannot set; one such label in the Node's
        # patch would cost all the others (a DMI name of "To-Be-Filled-By-O.E.M.")
        valid = {name: value for name, value in labels.items() if is_label_value(value)}
        for name in sorted(labels.keys() - valid.keys()):
            log.warning(
                "node %s: GFD label %s=%r left off: not a label value (at most 63 "
                "characters, beginning and ending with a letter or digit)",
                node_name,
                name,
                labels[name],
            )
        try:
            api = api_client(url=kube_url, kubeconfig=kubeconfig, user_agent="gpufleet-plugin")
            apply_node_labels(api, node_name, valid, owner=OWNER)
            log.info("GFD labels set on node %s (%d labels)", node_name, len(valid))
        except (ValueError, ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("node %s: cannot set GFD labels: %s", node_name, str(exc).strip())
    return labels


def _machine_type(path: str) -> str:
    """The DMI product name, as GFD reads it: "unknown" for no file or an unreadable one."""
    if not path:
        return MACHINE_UNKNOWN
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError as exc:
        log.warning("%s: cannot read the machine type: %s", path, exc)
        return MACHINE_UNKNOWN


def _pci_classes(node: NodeGpus, root: Path) -> tuple[int, ...]:
    """The GPUs' PCI classes; () (mode "unknown", as GFD) when one cannot be read."""
    try:
        return pci_classes((g.pci_bus_id for g in node.gpus), root=root)
    except (OSError, ValueError) as exc:
        log.warning("cannot read the GPUs' PCI class (nvidia.com/gpu.mode is unknown): %s", exc)
        return ()
