"""The kubelet's gRPC APIs as both daemons use them: protos, stubs, the checkpoint format,
unix-socket helpers.

`proto/` holds pod-resources v1 and device plugin v1beta1 exactly as the kubelet defines
them on the wire; `api/` the stubs generated from them (scripts/gen_protos.py);
`checkpoint` reads and writes the device manager's `kubelet_internal_checkpoint`;
`sockets` checks and waits for unix sockets. The clients that speak for one daemon live in
that daemon (`exporter.pods`, `plugin.kubelet`); the fake kubelet lives in `gpufleet.lab`.

Rule: protocol facts (field numbers, names, paths) are used exactly; nothing here may bend
the protocol.
"""
