"""A fake kubelet for tests and the lab: pod-resources v1 and device plugin v1beta1
Registration, served over real unix sockets with the kubelet's real error codes and texts.

`kubelet` is the stand-in kubelet; `table` its allocation bookkeeping; `podresources` and
`deviceplugins` its two gRPC servers (on `gpufleet.kubelet.sockets.UnixSocketServer`).
Clients are tested exactly as they will run against a kubelet.
"""
