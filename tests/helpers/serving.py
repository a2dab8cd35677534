"""A pod's /metrics in a thread: the text a callable returns, on a loopback port; and any
stand-in HTTP handler served so."""

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a loopback port, in a thread: yields its base URL, stopped after."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}"
    finally:
        http.shutdown()
        http.server_close()


class MetricsServer:
    """Serves `render()` at /metrics until `stop`; `address` is host:port for a scrape config."""

    def __init__(self, render: Callable[[], str]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.address = f"127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def vllm_queue(started: float | None = None) -> Callable[[], str]:
    """One vLLM pod under a long queue: 200 waiting, 64 running, ~20 finished/s, each prompt
    of the first three in four up to 1,000 tokens, the fourth up to 50,000."""
    start = time.time() if started is None else started

    def render() -> str:
        done = int((time.time() - start) * 20)
        labels = 'model_name="m",engine="0"'
        return (
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} 200\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} 64\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {done}\n'
            "# TYPE vllm:request_prompt_tokens histogram\n"
            f'vllm:request_prompt_tokens_bucket{{{labels},le="1000.0"}} {done - done // 4}\n'
            f'vllm:request_prompt_tokens_bucket{{{labels},le="50000.0"}} {done}\n'
            f'vllm:request_prompt_tokens_bucket{{{labels},le="+Inf"}} {done}\n'
            f"vllm:request_prompt_tokens_count{{{labels}}} {done}\n"
        )

    return render
