"""The plugin's side of the kubelet's device plugin v1beta1 API: the DevicePlugin gRPC
service on its unix socket, and registration that survives kubelet restarts.

Rule: answers come from the core's records; an RPC never touches NVML.
"""
