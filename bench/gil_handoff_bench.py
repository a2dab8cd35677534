"""What a busy main thread costs an answer served by another thread, by GIL switch interval.

The autoscaler serves the external metrics API and KEDA's scaler on a thread of their own
while its main thread runs the control loop, CPU-bound for most of a tick at 1,000
workloads. An answer needs the GIL at each of its hand-offs (the loop waking, the read,
the write); while the main thread holds it, each waits up to the switch interval. Here a
server thread echoes over loopback TCP to a client in another process (one request at a
time) while the main thread runs pure-Python work, or not (the idle row, the floor), for
each switch interval. Reports the answer's p50/p99 and how much of the busy thread's work
rate each interval keeps (the cost of switching more often), all in the same run.

    python3 -m bench.gil_handoff_bench [--requests 5000] [--intervals 0.005,0.0005,0.0001]
"""

import argparse
import asyncio
import socket
import subprocess
import sys
import threading
import time

from bench.entry import exit_with

CLIENT = """
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conn = socket.create_connection(("127.0.0.1", port))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = []
for _ in range(n):
    t = time.perf_counter()
    conn.sendall(b"ping")
    conn.recv(16)
    out.append(time.perf_counter() - t)
print(" ".join(f"{x:.7f}" for x in out))
"""


def serve(
    ready: threading.Event,
    port: list[int],
    stop: list[asyncio.Event],
    loop: list[asyncio.AbstractEventLoop],
) -> None:
    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(16):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        stop.append(asyncio.Event())
        loop.append(asyncio.get_running_loop())
        ready.set()
        await stop[0].wait()
        server.close()

    asyncio.run(main())


def busy_work(until: list[bool]) -> int:
    """Pure-Python arithmetic, as a policy decision is; returns the iterations done."""
    done, x = 0, 0.0
    while not until[0]:
        for i in range(1000):
            x = (x + i * 1.0001) % 97.0
        done += 1
    return done


def measure(requests: int, interval: float | None) -> tuple[float, float, float]:
    """p50 ms, p99 ms, busy iterations per second (0 when idle)."""
    sys.setswitchinterval(interval or 0.005)
    ready, port, stop, loop = threading.Event(), [], [], []
    thread = threading.Thread(target=serve, args=(ready, port, stop, loop), daemon=True)
    thread.start()
    ready.wait()
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(port[0]), str(requests)],
        stdout=subprocess.PIPE,
        text=True,
    )
    until, output = [False], []

    def wait() -> None:
        output.append(client.communicate()[0])  # read as it comes: a pipe holds 64 KiB
        until[0] = True

    started = time.perf_counter()
    waiter = threading.Thread(target=wait)
    waiter.start()
    done = busy_work(until) if interval is not None else 0
    waiter.join()
    elapsed = time.perf_counter() - started
    latencies = sorted(float(x) for x in output[0].split())
    loop[0].call_soon_threadsafe(stop[0].set)
    thread.join(5)
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    return p50, p99, done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--intervals", default="0.005,0.0005,0.0001")
    args = parser.parse_args()
    rows = [("idle (floor)", *measure(args.requests, None))]
    for text in args.intervals.split(","):
        rows.append((f"busy, {float(text) * 1000:g} ms", *measure(args.requests, float(text))))
    base = next((r[3] for r in rows if r[3]), 1.0)
    print("| main thread, switch interval | p50 ms | p99 ms | busy work kept |")
    print("|---|---:|---:|---:|")
    for name, p50, p99, rate in rows:
        kept = f"{rate / base:.2f}" if rate else "-"
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {kept} |")
    with open("/proc/loadavg") as f:
        print(f"\nload average {f.read().split()[0]} on {socket.gethostname()}")


if __name__ == "__main__":
    exit_with(main)
