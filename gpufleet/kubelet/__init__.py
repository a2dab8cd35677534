"""The kubelet's gRPC APIs: .proto files, generated stubs and a fake kubelet.

`proto/` holds pod-resources v1 and device plugin v1beta1 exactly as the kubelet defines
them on the wire; `api/` holds the stubs generated from them (scripts/gen_protos.py);
`checkpoint` reads and writes the device manager's `kubelet_internal_checkpoint`; `fake`
is a stand-in kubelet for tests and the lab (`fake_table`: its allocation bookkeeping).

Rule: the fake speaks the real protocol over real unix sockets, with the real error codes
and texts, so clients are tested exactly as they will run against a kubelet. Nothing here
may bend the protocol to make a test easier.
"""
