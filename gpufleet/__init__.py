"""gpufleet: GPU telemetry, device plugin and autoscaling for Kubernetes.

Subpackages: `nvml` (NVML access and the simulated NVML), `kubelet` (the kubelet's gRPC
APIs and a fake kubelet), `exporter` (the dcgm-exporter drop-in).
"""

__version__ = "0.1.0"
