"""Kubernetes API adapters the daemons share, on the official `kubernetes` client.

`connect` builds a client (in-cluster, a kubeconfig, or a URL such as the lab's fake API
server); `errors` sorts the client's failures into the few kinds a daemon counts;
`events` records events.k8s.io/v1 Events deduplicated as the kubelet does. A daemon's own
reads and writes live in that daemon (`autoscaler.kube`).

Rule: an adapter turns API objects into plain records and applies decisions; it makes no
decision itself, and a failure is a `KubeError` with a kind, never a crash.
"""
