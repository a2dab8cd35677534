"""The autoscaler's pure core: observations, workloads, the policy interface, workload
behavior, the `gpufleet` policy (capacity, forecast), the HPA and KEDA baselines, the node
planner and the policy factory.

Rule: pure. No I/O, no clock, no logging (import-linter enforces it); time arrives as
`Observation.now`, and a decision returns its reason.
"""
