"""The resources the fake API server serves: group, version, names, scope and subresources.

Facts from the Kubernetes API (and the CRDs' own manifests for KEDA, Karpenter, Kueue,
Cluster Autoscaler's CapacityBuffer and gpufleet), so discovery, URL paths and kinds are
what the official client and kubectl expect. Pure data.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """One REST resource: `/api/v1/...` when `group` is "", else `/apis/{group}/{version}/...`."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status: bool = False  # has a /status subresource
    scale: bool = False  # has an autoscaling/v1 /scale subresource
    # Strategic merge patch is served for built-in types only; a real API server answers 415
    # for it on a custom resource, which a client must not find out in production first.
    builtin: bool = True
    # A CRD a cluster may lack (its presence changes what clients do): served only by a
    # server told it is installed.
    optional: bool = False

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


def _crd(group: str, version: str, plural: str, kind: str, **kw) -> Resource:
    return Resource(group=group, version=version, plural=plural, kind=kind, builtin=False, **kw)


RESOURCES: tuple[Resource, ...] = (
    Resource(
        group="",
        version="v1",
        plural="namespaces",
        kind="Namespace",
        namespaced=False,
        singular="namespace",
        short_names=("ns",),
        status=True,
    ),
    Resource(
        group="",
        version="v1",
        plural="pods",
        kind="Pod",
        singular="pod",
        short_names=("po",),
        status=True,
    ),
    Resource(
        group="",
        version="v1",
        plural="nodes",
        kind="Node",
        namespaced=False,
        singular="node",
        short_names=("no",),
        status=True,
    ),
    Resource(
        group="", version="v1", plural="events", kind="Event", singular="event", short_names=("ev",)
    ),
    Resource(
        group="",
        version="v1",
        plural="services",
        kind="Service",
        singular="service",
        short_names=("svc",),
        status=True,
    ),
    Resource(
        group="",
        version="v1",
        plural="podtemplates",
        kind="PodTemplate",
        singular="podtemplate",
    ),
    Resource(
        group="",
        version="v1",
        plural="configmaps",
        kind="ConfigMap",
        singular="configmap",
        short_names=("cm",),
    ),
    Resource(
        group="",
        version="v1",
        plural="replicationcontrollers",
        kind="ReplicationController",
        singular="replicationcontroller",
        short_names=("rc",),
        status=True,
        scale=True,
    ),
    Resource(
        group="apps",
        version="v1",
        plural="replicasets",
        kind="ReplicaSet",
        singular="replicaset",
        short_names=("rs",),
        status=True,
        scale=True,
    ),
    Resource(
        group="apps",
        version="v1",
        plural="deployments",
        kind="Deployment",
        singular="deployment",
        short_names=("deploy",),
        status=True,
        scale=True,
    ),
    Resource(
        group="apps",
        version="v1",
        plural="statefulsets",
        kind="StatefulSet",
        singular="statefulset",
        short_names=("sts",),
        status=True,
        scale=True,
    ),
    Resource(
        group="events.k8s.io",
        version="v1",
        plural="events",
        kind="Event",
        singular="event",
        short_names=("ev",),
    ),
    Resource(
        group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", singular="lease"
    ),
    Resource(
        group="scheduling.k8s.io",
        version="v1",
        plural="priorityclasses",
        kind="PriorityClass",
        namespaced=False,
        singular="priorityclass",
        short_names=("pc",),
    ),
    Resource(
        group="autoscaling",
        version="v2",
        plural="horizontalpodautoscalers",
        kind="HorizontalPodAutoscaler",
        singular="horizontalpodautoscaler",
        short_names=("hpa",),
        status=True,
    ),
    Resource(
        group="resource.k8s.io",
        version="v1",
        plural="resourceslices",
        kind="ResourceSlice",
        namespaced=False,
        singular="resourceslice",
    ),
    Resource(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural="clusterroles",
        kind="ClusterRole",
        namespaced=False,
        singular="clusterrole",
    ),
    Resource(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural="clusterrolebindings",
        kind="ClusterRoleBinding",
        namespaced=False,
        singular="clusterrolebinding",
    ),
    Resource(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural="roles",
        kind="Role",
        singular="role",
    ),
    Resource(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural="rolebindings",
        kind="RoleBinding",
        singular="rolebinding",
    ),
    _crd(
        "keda.sh",
        "v1alpha1",
        "scaledobjects",
        "ScaledObject",
        singular="scaledobject",
        short_names=("so",),
        status=True,
    ),
    _crd(
        "karpenter.sh",
        "v1",
        "nodepools",
        "NodePool",
        namespaced=False,
        singular="nodepool",
        status=True,
    ),
    _crd(
        "autoscaling.gpufleet.dev",
        "v1alpha1",
        "gpuautoscalers",
        "GPUAutoscaler",
        singular="gpuautoscaler",
        short_names=("gpa",),
        status=True,
    ),
    # kubernetes-sigs/kueue config/components/crd/bases (v1beta2: the storage version)
    _crd(
        "kueue.x-k8s.io",
        "v1beta2",
        "workloads",
        "Workload",
        singular="workload",
        short_names=("kwl", "kueueworkload", "kueueworkloads"),
        status=True,
    ),
    _crd(
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        "ResourceFlavor",
        namespaced=False,
        singular="resourceflavor",
        short_names=("flavor", "flavors", "rf"),
    ),
    # kubernetes/autoscaler cluster-autoscaler/apis/capacitybuffer/autoscaling.x-k8s.io/v1beta1
    _crd(
        "autoscaling.x-k8s.io",
        "v1beta1",
        "capacitybuffers",
        "CapacityBuffer",
        singular="capacitybuffer",
        short_names=("cb",),
        status=True,
        optional=True,
    ),
    _crd(
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        "LeaderWorkerSet",
        singular="leaderworkerset",
        short_names=("lws",),
        status=True,
        scale=True,
    ),
)


# Field selectors each kind's strategy serves beyond metadata.name (and metadata.namespace
# where it is namespaced): `GetAttrs`/`ToSelectableFields` in kubernetes pkg/registry. Any
# other field is a 400 there, which a lenient fake would let a client find out in production.
# Kinds left out here (events.k8s.io's Events) are not checked.
_SELECTABLE: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "namespaces"): ("status.phase",),
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("", "services"): ("spec.clusterIP", "spec.type"),
    ("", "replicationcontrollers"): ("status.replicas",),
    ("apps", "replicasets"): ("status.replicas",),
    ("resource.k8s.io", "resourceslices"): ("spec.nodeName", "spec.driver"),
}
_UNCHECKED = frozenset({("events.k8s.io", "events")})


def selectable_fields(res: Resource) -> frozenset[str] | None:
    """The field selectors a list or watch of `res` may use; None where not checked."""
    if (res.group, res.plural) in _UNCHECKED:
        return None
    meta = ("metadata.name", "metadata.namespace") if res.namespaced else ("metadata.name",)
    return frozenset((*meta, *_SELECTABLE.get((res.group, res.plural), ())))
