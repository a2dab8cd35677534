"""The device plugin benchmark's RPC client: timed calls, one at a time, answers checked.

It runs in its own process (`python3 -m bench.plugin_rpc SOCKET METHOD REQUESTS`, which
`in_child` starts), as the kubelet is its own process: its Python gRPC overhead and GIL
are then not the plugin's. `time_calls` runs it there, or in the calling process.
"""

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2 as pb
from gpufleet.kubelet.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc

WARMUP_CALLS = 50
READY_TIMEOUT_SECONDS = 30.0
RPC_TIMEOUT_SECONDS = 10.0
CLIENT_TIMEOUT_SECONDS = 300.0


class BenchError(Exception):
    """The benchmark could not run or an answer was wrong."""


# An answer check returns what is wrong, or None.
Check = Callable[[object, object], str | None]


def check_allocate(request, response) -> str | None:
    (container,) = response.container_responses
    if not container.envs.get("NVIDIA_VISIBLE_DEVICES"):
        return f"Allocate({request.container_requests[0].devices_ids}) without a device env"
    return None


def check_preferred(request, response) -> str | None:
    (req,) = request.container_requests
    (answer,) = response.container_responses
    chosen = list(answer.deviceIDs)
    if (
        len(chosen) != req.allocation_size
        or len(set(chosen)) != len(chosen)
        or not set(chosen) <= set(req.available_deviceIDs)
        or not set(req.must_include_deviceIDs) <= set(chosen)
    ):
        return f"GetPreferredAllocation answered {chosen} to {req}"
    return None


# Timed RPC -> its request type and answer check.
RPCS: dict[str, tuple[type, Check]] = {
    "Allocate": (pb.AllocateRequest, check_allocate),
    "GetPreferredAllocation": (pb.PreferredAllocationRequest, check_preferred),
}


def call_and_time(socket: Path, method: str, requests: Sequence) -> tuple[list[float], float]:
    """Call `method` once per request on a warm channel, after WARMUP_CALLS untimed ones,
    checking every answer. Returns each timed call's seconds and this process's CPU seconds
    over them. Raises BenchError on a wrong answer."""
    _, check = RPCS[method]
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_SECONDS)
        call = getattr(pb_grpc.DevicePluginStub(channel), method)
        for request in requests[:WARMUP_CALLS]:
            call(request, timeout=RPC_TIMEOUT_SECONDS)
        seconds = []
        cpu_start = time.process_time()
        for request in requests:
            start = time.perf_counter()
            response = call(request, timeout=RPC_TIMEOUT_SECONDS)
            seconds.append(time.perf_counter() - start)
            problem = check(request, response)
            if problem:
                raise BenchError(problem)
        return seconds, time.process_time() - cpu_start


def rpc_client_main(socket: Path, method: str, requests_file: Path) -> int:
    """The child process: the requests are length-prefixed protobufs in
    `requests_file`; prints one JSON line, {"seconds": [...], "cpu_seconds": x}, or exits 1
    saying on stderr what went wrong."""
    request_type, _ = RPCS[method]
    data, requests, offset = requests_file.read_bytes(), [], 0
    while offset < len(data):
        size = int.from_bytes(data[offset : offset + 4], "big")
        requests.append(request_type.FromString(data[offset + 4 : offset + 4 + size]))
        offset += 4 + size
    try:
        seconds, cpu = call_and_time(socket, method, requests)
    except (BenchError, grpc.RpcError, grpc.FutureTimeoutError) as exc:
        print(f"rpc client failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu}))
    return 0


def in_child(socket: Path, method: str, requests: Sequence) -> tuple[list[float], float]:
    """`call_and_time` in a child process, as a separate kubelet calls."""
    with tempfile.NamedTemporaryFile(prefix="gfpb-requests-") as file:
        for request in requests:
            body = request.SerializeToString()
            file.write(len(body).to_bytes(4, "big") + body)
        file.flush()
        run = subprocess.run(
            [
                *(sys.executable, "-m", "bench.plugin_rpc"),
                *(str(socket), method, file.name),
            ],
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_SECONDS,
            check=False,
        )
    if run.returncode != 0:
        raise BenchError(f"{method} client process failed: {run.stderr.strip()[-2000:]}")
    answer = json.loads(run.stdout)
    return answer["seconds"], answer["cpu_seconds"]


def time_calls(
    socket: Path, method: str, requests: Sequence, *, client: str
) -> tuple[list[float], float]:
    """`call_and_time` from a child process, or this one when `client` is "in-process"."""
    if client == "in-process":
        return call_and_time(socket, method, requests)
    return in_child(socket, method, requests)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python3 -m bench.plugin_rpc SOCKET METHOD REQUESTS")
    sys.exit(rpc_client_main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
