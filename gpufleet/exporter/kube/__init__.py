"""The Kubernetes API, for what the kubelet cannot tell: pod labels and UIDs
(`--kubernetes-enable-pod-labels`), the DRA driver's ResourceSlices
(`--kubernetes-enable-dra`) and the counters CSV in a ConfigMap (`-m`).

Rule: never on the scrape or collection path (listed in the background, the last good view
kept), never raises into the collector; failures are counted by kind.
"""
