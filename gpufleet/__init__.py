"""gpufleet: GPU telemetry, device plugin and autoscaling for Kubernetes.

Three daemons and what they share:
- `exporter`, `plugin`, `autoscaler`: one package per daemon, each with a pure `core/`, one
  package per thing it talks to, and its wiring (`daemon`, `settings`) at the root. The
  daemons never import each other.
- `core` (pure helpers), `nvml` (the real NVML adapter and the one backend choice),
  `kubelet` (the kubelet's gRPC APIs), `kube` (Kubernetes API adapters): shared by daemons.
- `lab`: the simulated world (simulated NVML, fake kubelet, simulated node, `gpufleet lab`).
  Product code never imports it, except `nvml.backend` behind `--sim-fleet`.
- `cli`, `settings`, `logs`: the entry point, flags from the environment, one-line logs.
"""

__version__ = "0.1.0"
