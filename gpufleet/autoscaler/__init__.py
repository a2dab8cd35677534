"""The autoscaler: telemetry and queue signals in, replica counts and node capacity out.

`core` holds the policies and what they decide with; `controller` is the live loop that
runs them against a cluster, with `prom` and `kube` its adapters, `extmetrics` and
`kedascaler` serving the same signals to HPA and KEDA; `replay` is the trace replayer
behind `gpufleet simulate`, which calls exactly those policies at their real intervals on
observations delayed the way a real metrics pipeline delays them. Rule, enforced by
import-linter: daemon > metrics, settings, replay > controller > adapters (prom, kube,
extmetrics, kedascaler) > core.
"""
