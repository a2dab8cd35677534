"""The HPA baseline: Kubernetes' HorizontalPodAutoscaler, ported as a policy.

`calc` is the replica calculator, `metrics` reads Observations as HPA's metric types, and
`policy` combines them with the workload's behavior. Pure, as the rest of `core`.
"""
