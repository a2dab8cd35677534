"""What an http(s) URL setting must be, checked where it is given rather than at first use."""

from urllib.parse import urlsplit


def check_http_url(url: str) -> None:
    """ValueError unless `url` is an http:// or https:// URL with a host and a valid port:
    `http://[::1` and port 99999 parsed, and failed at every request once the daemon ran."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as err:
        raise ValueError(f"not a URL: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http:// or https:// URL")
