"""Generated Python stubs for KEDA's external scaler API: never edit them by hand.

`externalscaler_*` (package `externalscaler`, service `ExternalScaler`) are written by
`python scripts/gen_protos.py` from `gpufleet/autoscaler/kedascaler/proto/externalscaler.proto`;
tests/kubelet/test_stubs_current.py fails when they drift.
"""
