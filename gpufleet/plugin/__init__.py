"""The device plugin: a drop-in for NVIDIA's k8s-device-plugin on the kubelet's v1beta1 API.

Pipeline: discover (`nvml`: GPUs, MIG devices, topology, health events; `host`: device
nodes, driver files, CDI spec directories) -> decide (`core`: config, devices, allocate,
preferred, health, cdi) -> serve (`kubelet`: the DevicePlugin gRPC service and its
registration). `daemon` and `settings` wire it. Rule: wiring > adapters > core, enforced
by import-linter; health and allocation never fail because one GPU is lost.
"""
