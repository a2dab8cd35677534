"""The autoscaler's reads and writes through the Kubernetes API: its custom resources, the
targets' scale subresources, their pods, competing HPAs and ScaledObjects, status and
deletion costs.

Rule: plain records in (`core.replicas.PodState`, scale views), decisions applied out; a
failure is a `gpufleet.kube.errors.KubeError`, and one workload's failure never stops the
others. Calls are synchronous (the official client): the controller runs them in threads.
"""
