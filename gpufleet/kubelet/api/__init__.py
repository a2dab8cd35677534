"""Generated Python stubs for the kubelet's gRPC APIs: never edit them by hand.

`podresources_v1_*` (package `v1`, service `PodResourcesLister`) and
`deviceplugin_v1beta1_*` (package `v1beta1`, services `Registration` and `DevicePlugin`) are
written by `python scripts/gen_protos.py` from `gpufleet/kubelet/proto/*.proto`;
tests/kubelet/test_stubs_current.py fails when they drift.
"""
