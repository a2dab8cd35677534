"""The simulated world: GPUs, a kubelet and pods that are not there, behind real protocols.

`nvml` is a simulated NVML with pynvml's API; `kubelet` a fake kubelet speaking the real
gRPC protocols over real unix sockets; `node` puts both together as one GPU node with pods;
`kubeapi` is a fake Kubernetes API server (real REST for the official client) with the small
controllers that make it a cluster; `serving` simulated vLLM pods; `main` is `gpufleet lab`,
wiring them with the real daemons (`gpunode`, `workload`), real Prometheus (`prometheus`)
and its web page (`web`, `page/`).
Tests, benchmarks and the lab run the product's own code paths against it.

Rule: product code never imports this package, except `gpufleet.nvml.backend` (the
backend behind `--sim-fleet`) and `gpufleet.cli` (which dispatches the `lab` command);
import-linter enforces it. Nothing here may bend a protocol to make a test easier.
"""
