"""Listen addresses as both daemons take them: dcgm-exporter's `--address` syntax.

One parser for the exporter's `--address` and the plugin's `--metrics-address`, so the two
accept and refuse exactly the same strings. Pure: no I/O (nothing is bound here).
"""

from gpufleet.core.numbers import ascii_int

_UNSPECIFIED = frozenset(("", "0.0.0.0", "::"))


def parse_listen_address(text: str) -> tuple[str | None, int]:
    """Parse dcgm-exporter's `--address`: `:9400`, `0.0.0.0:9400`, `[::1]:9400`, `host:9400`.

    The host is None for `:PORT`, `0.0.0.0:PORT` and `[::]:PORT`: every interface, IPv4
    and IPv6, as Go listens on each (dcgm-exporter's help suggests `[::]:9400`). Bound as
    given, `::` was IPv6 only (asyncio sets IPV6_V6ONLY): IPv4 scrapes and probes were
    refused. Raises ValueError naming the address and what is wrong with it.
    """
    value = text.strip()
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or not host:
            raise ValueError(f"listen address {text!r}: expected [IPV6]:PORT, e.g. [::1]:9400")
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError(f"listen address {text!r}: missing port, e.g. :9400")
        if ":" in host:
            raise ValueError(f"listen address {text!r}: put an IPv6 host in brackets: [::1]:9400")
    number = ascii_int(port, max_digits=10)
    if number is None or number > 65535:
        raise ValueError(f"listen address {text!r}: port must be a number from 0 to 65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"listen address {text!r}: the host contains whitespace")
    return (None if host in _UNSPECIFIED else host), number
