"""What one pod-resources `List` costs the exporter's process, three ways (issue 15).

The fake kubelet (a real grpcio server on a unix socket, the lab's 104 pods) runs in this
process; each client runs in a fresh interpreter of its own, which makes `List` calls in a
row and reports its CPU time per call (process_time) and its RSS afterwards:
- `grpcio, channel kept`: the exporter before issue 15's h2 client (the baseline);
- `h2, a connection per call`: `grpcunary.UnaryClient`, what the exporter does now;
- `h2, one connection kept`: the same frames on one connection, streams 1, 3, 5, ... (the
  alternative it was chosen over).
CPU is quoted beside its ratio to the baseline, measured in the same run (the ratio is
the figure to compare across runs); latency is not measured.

Run from the repository root:  python3 -m bench.podresources_call [--calls 300]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.entry import exit_with
from gpufleet.lab.node import NodeLayout, SimNode

_CLIENT = r"""
import json, sys, time
from pathlib import Path

path, variant, calls = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
METHOD = "/v1.PodResourcesLister/List"

if variant == "grpcio":
    import grpc
    channel = grpc.insecure_channel(f"unix://{path}", options=[("grpc.enable_http_proxy", 0)])
    stub = channel.unary_unary(METHOD, _registered_method=True)
    call = lambda: stub(b"", timeout=5.0)
elif variant == "h2-per-call":
    from gpufleet.exporter.pods.grpcunary import UnaryClient
    client = UnaryClient(path, max_receive_bytes=16 << 20)
    call = lambda: client.call(METHOD, b"", timeout_seconds=5.0)
else:
    import socket
    import h2.config, h2.connection, h2.events
    from gpufleet.exporter.pods.grpcwire import ReplyBuffer, length_prefixed, request_headers
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding=None))
    conn.initiate_connection()

    def call():
        stream = conn.get_next_available_stream_id()
        headers = request_headers(METHOD, authority="localhost", timeout_seconds=5.0)
        conn.send_headers(stream, headers)
        conn.send_data(stream, length_prefixed(b""), end_stream=True)
        sock.sendall(conn.data_to_send())
        reply, ended = ReplyBuffer(16 << 20), False
        while not ended:
            for event in conn.receive_data(sock.recv(65536)):
                if isinstance(event, h2.events.DataReceived):
                    reply.feed(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                ended = ended or isinstance(event, h2.events.StreamEnded)
            sock.sendall(conn.data_to_send())
        return reply.message()

size = len(call())  # warm: imports, first connection
start = time.process_time()
for _ in range(calls):
    call()
cpu = time.process_time() - start
rss = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
print(json.dumps({"cpu_per_call": cpu / calls, "rss": rss, "reply_bytes": size}))
"""

VARIANTS = {
    "grpcio": "grpcio, channel kept (the exporter before)",
    "h2-per-call": "h2, a connection per call (the exporter now)",
    "h2-kept": "h2, one connection kept",
}


def measure(socket_path: Path, variant: str, calls: int) -> dict[str, float]:
    """One client's figures, from its own interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", _CLIENT, str(socket_path), variant, str(calls)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(result.stdout)


def markdown(calls: int, rounds: int) -> str:
    """Runs every variant `rounds` times, alternating, and reports the medians."""
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with (
        tempfile.TemporaryDirectory(prefix="gf-", dir="/tmp") as root,
        SimNode(NodeLayout(), root=Path(root)) as node,  # no rate limit
    ):
        assert node.kubelet is not None
        for _ in range(rounds):
            for variant in VARIANTS:
                runs[variant].append(measure(node.kubelet.pod_resources_socket, variant, calls))
    sizes = sorted({int(r["reply_bytes"]) for results in runs.values() for r in results})
    base = _median([r["cpu_per_call"] for r in runs["grpcio"]])
    lines = [
        "# pod-resources List, per client",
        "",
        f"- command: `python3 -m bench.podresources_call --calls {calls} --rounds {rounds}`",
        f"- reply: {' or '.join(map(str, sizes))} bytes"
        f"{', the same for every client' if len(sizes) == 1 else ': CLIENTS DIFFER'}; "
        f"medians of {rounds} runs each",
        "",
        "| client | CPU per List, ms | x the grpcio channel's | RSS after, MiB |",
        "|---|---:|---:|---:|",
    ]
    for variant, name in VARIANTS.items():
        cpu = _median([r["cpu_per_call"] for r in runs[variant]])
        rss = _median([r["rss"] for r in runs[variant]])
        lines.append(f"| {name} | {cpu * 1e3:.2f} | {cpu / base:.2f} | {rss / (1 << 20):.1f} |")
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.podresources_call", description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="List calls per client run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per client, alternating")
    options = parser.parse_args(argv)
    print(markdown(options.calls, options.rounds))
    return 0


if __name__ == "__main__":
    exit_with(main)
