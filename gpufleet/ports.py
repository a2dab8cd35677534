"""Whether a TCP address can be listened on, asked before a server that says it worse binds.

gRPC's failure to bind prints a line of its C core's besides its own vague one, and a lab's
child process writes its failure into a log after the lab said it runs: a daemon probes
the address first and names the flag itself.
"""

import socket


def check_bindable(host: str | None, port: int) -> None:
    """Bind host:port (every interface for None) and let it go; raises OSError (a resolver
    error included) where a server could not bind it. SO_REUSEADDR as servers bind (Go,
    aiohttp, gRPC): a port left in TIME_WAIT is free to them, one with a listener is not
    (on Linux)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        host or "::", port, type=socket.SOCK_STREAM
    )[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(sockaddr)
