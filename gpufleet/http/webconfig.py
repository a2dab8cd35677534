"""The `--web-config-file` of dcgm-exporter: Prometheus exporter-toolkit's TLS and auth file.

Exists so a web config written for dcgm-exporter (or any Prometheus exporter) works unchanged:
the same keys, the same strictness (an unknown key or a wrong type is an error, as with Go's
`yaml.UnmarshalStrict`), relative paths resolved against the file's directory, and the same
checks on headers and client CAs. Everything is validated at startup, certificate files
included, so a bad file stops the daemon with a message naming the file and the key.

Differences from exporter-toolkit, all fail-closed: the file is read once (restart to apply a
change; exporter-toolkit re-reads it per request and per handshake), though the certificate,
key and client-CA files it names are read again when they change; `client_allowed_sans` is
refused; `RequireAnyClientCert` also verifies the client certificate, because Python's ssl
cannot request a certificate without verifying it; `curve_preferences` is checked but OpenSSL's
default groups are used; only HTTP/1.1 is served, whatever `http2` says.

This module parses and validates the file and checks basic auth; `tls` turns the parsed
`tls_server_config` into the server's SSLContext. Never log or repr a password, a hash or an
inline key.
"""

import base64
import hashlib
import hmac
import logging
import os
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import bcrypt
import yaml

from gpufleet.core.messages import shown
from gpufleet.http.tls import (
    CIPHER_SUITES,
    CLIENT_AUTH_ALIASES,
    CURVES,
    TLS_VERSIONS,
    ClientAuth,
    TlsServerConfig,
    TlsSetupError,
    build_ssl_context,
)
from gpufleet.http.tls_reload import ReloadingContext

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class WebConfigError(ValueError):
    """The web config file is unreadable or invalid; the message names the file and key."""


# exporter-toolkit's allowlist: header -> allowed values (empty: any value).
_EXTRA_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

_BCRYPT_HASH = re.compile(r"\$2[aby]?\$(?P<cost>\d\d)\$[./A-Za-z0-9]{53}")
_BCRYPT_MAX_PASSWORD_BYTES = 72  # Go's bcrypt compares only these; pyca/bcrypt refuses more
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """`rate_limit`: a token bucket refilled by one token per interval (429 when empty)."""

    burst: int
    interval_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WebConfig:
    """A parsed web config. `tls` is None when the file enables no TLS (plain HTTP)."""

    source: Path
    tls: TlsServerConfig | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    rate_limit: RateLimit | None = None
    # user -> sha256 of the password last verified for it; bcrypt is deliberately slow.
    _verified: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    # One bcrypt at a time (as exporter-toolkit does): a flood of bad passwords costs one core.
    _bcrypt_lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    @property
    def auth_required(self) -> bool:
        return bool(self.basic_auth_users)

    def ssl_context(self) -> ssl.SSLContext | None:
        """Build the server's SSLContext (None for plain HTTP), reading the certificate files;
        it follows them when they change (`tls_reload`), as exporter-toolkit does.

        Raises WebConfigError naming the file and key when a file is missing or invalid.
        """
        tls = self.tls
        if tls is None:
            return None

        def build() -> ssl.SSLContext:
            try:
                return build_ssl_context(tls)
            except TlsSetupError as exc:
                raise WebConfigError(f"{self.source}: {exc.key_path}: {exc.problem}") from None

        files = [f for f in (tls.cert_file, tls.key_file, tls.client_ca_file) if f is not None]
        return ReloadingContext(build, files).context

    def check_basic_auth_cached(self, header_value: str | None) -> bool:
        """True only when these credentials were verified before; never runs bcrypt.

        Lets the server answer repeat scrapes on the event loop and send only cache
        misses to a thread.
        """
        credentials = _parse_basic_auth(header_value)
        if credentials is None:
            return False
        user, password = credentials
        remembered = self._verified.get(user)
        return remembered is not None and hmac.compare_digest(
            remembered, hashlib.sha256(password).digest()
        )

    def check_basic_auth(self, header_value: str | None) -> bool:
        """Verify an `Authorization` header against `basic_auth_users`.

        True when no users are configured. A miss runs bcrypt (tens to hundreds of ms):
        call it off the event loop. An unknown user costs the same bcrypt as a known one,
        so timing does not reveal which users exist.
        """
        if not self.basic_auth_users:
            return True
        if self.check_basic_auth_cached(header_value):
            return True
        credentials = _parse_basic_auth(header_value)
        if credentials is None:
            return False
        user, password = credentials
        stored = self.basic_auth_users.get(user)
        target = stored if stored is not None else next(iter(self.basic_auth_users.values()))
        with self._bcrypt_lock:
            matches = bcrypt.checkpw(password[:_BCRYPT_MAX_PASSWORD_BYTES], target)
        if not (matches and stored is not None):
            return False
        self._verified[user] = hashlib.sha256(password).digest()
        return True


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read, parse and fully validate a web config file (certificates loaded once to check).

    Raises WebConfigError with a message naming the file, and the key where one is at fault.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{source}: cannot read the web config file: {exc}") from None
    config = parse_web_config(text, source=source)
    config.ssl_context()
    if config.tls is not None:
        if config.tls.curve_preferences:
            log.warning("%s: tls_server_config.curve_preferences ignored", source)
        if config.tls.client_auth_type is ClientAuth.REQUIRE_ANY_CLIENT_CERT:
            log.warning("%s: RequireAnyClientCert also verifies client certificates", source)
    return config


def parse_web_config(text: str, *, source: Path) -> WebConfig:
    """Parse web config YAML; relative paths are resolved against `source`'s directory.

    Reads no other file: certificate problems surface in `WebConfig.ssl_context()`.
    """
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
        return _parse_root(raw, base_dir=source.parent, source=source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else str(source)
        problem = " ".join(str(exc.problem or exc.context or "").split())
        raise WebConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{source}: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise WebConfigError(f"{source}: invalid YAML: nested too deeply") from None
    except _FieldError as exc:
        raise WebConfigError(f"{source}: {exc.key_path}: {exc.problem}") from None


class _FieldError(Exception):
    def __init__(self, key_path: str, problem: str) -> None:
        super().__init__(f"{key_path}: {problem}")
        self.key_path = key_path
        self.problem = problem


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as Go's yaml.UnmarshalStrict does, and turns
    every value a tag cannot build (`!!timestamp x`, `2023-13-01`, `!!bool ""`) into a
    YAMLError at its line instead of a bare ValueError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, LookupError, OverflowError) as exc:
            value = shown(node.value) if isinstance(node, yaml.ScalarNode) else "this value"
            why = f" ({exc})" if isinstance(exc, ValueError) else ""  # others are PyYAML's
            problem = f"{value} is not a valid {node.tag.rpartition(':')[2]}{why}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # `!!set x`: the base class says so
            return super().construct_mapping(node, deep=deep)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # `[a]: b`: Go cannot have a list as a key either
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                ) from None
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {shown(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _parse_root(raw: object, *, base_dir: Path, source: Path) -> WebConfig:
    top = _mapping(
        raw, "", {"tls_server_config", "http_server_config", "rate_limit", "basic_auth_users"}
    )
    http = _mapping(top.get("http_server_config"), "http_server_config", {"http2", "headers"})
    _optional(http, "http_server_config", "http2", bool)
    return WebConfig(
        source=source,
        tls=_parse_tls(top.get("tls_server_config"), base_dir),
        basic_auth_users=_parse_users(top.get("basic_auth_users")),
        headers=_parse_headers(http.get("headers")),
        rate_limit=_parse_rate_limit(top.get("rate_limit")),
    )


def _parse_tls(raw: object, base_dir: Path) -> TlsServerConfig | None:
    where = "tls_server_config"
    keys = {
        "cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
        "client_ca_file", "cipher_suites", "curve_preferences", "min_version", "max_version",
        "prefer_server_cipher_suites", "client_allowed_sans",
    }  # fmt: skip
    tls = _mapping(raw, where, keys)
    text = {k: _optional(tls, where, k, str) or None for k in ("cert", "key", "client_ca")}
    paths = {
        k: base_dir / v if (v := _optional(tls, where, k, str)) else None
        for k in ("cert_file", "key_file", "client_ca_file")
    }
    auth_name = _optional(tls, where, "client_auth_type", str) or ""
    if not (any(text.values()) or any(paths.values()) or auth_name):
        return None  # exporter-toolkit's IsEnabled(): nothing that turns TLS on
    if tls.get("client_allowed_sans") is not None:
        raise _FieldError(f"{where}.client_allowed_sans", "not supported by gpufleet")
    if not (text["cert"] or paths["cert_file"]):
        raise _FieldError(where, "missing one of cert or cert_file")
    if not (text["key"] or paths["key_file"]):
        raise _FieldError(where, "missing one of key or key_file")
    auth = _client_auth(auth_name)
    if (text["client_ca"] or paths["client_ca_file"]) and auth is ClientAuth.NO_CLIENT_CERT:
        raise _FieldError(where, "client CAs are configured without a client_auth_type")
    prefer = _optional(tls, where, "prefer_server_cipher_suites", bool)
    return TlsServerConfig(
        cert_file=paths["cert_file"],
        key_file=paths["key_file"],
        cert=text["cert"],
        key=text["key"],
        client_auth_type=auth,
        client_ca_file=paths["client_ca_file"],
        client_ca=text["client_ca"],
        min_version=_tls_version(tls, "min_version", ssl.TLSVersion.TLSv1_2),
        max_version=_tls_version(tls, "max_version", ssl.TLSVersion.TLSv1_3),
        cipher_suites=_names(tls, "cipher_suites", CIPHER_SUITES),
        curve_preferences=_names(tls, "curve_preferences", CURVES),
        prefer_server_cipher_suites=prefer is not False,
    )


def _client_auth(name: str) -> ClientAuth:
    if name in CLIENT_AUTH_ALIASES:
        return CLIENT_AUTH_ALIASES[name]
    try:
        return ClientAuth(name)
    except ValueError:
        expected = ", ".join(member.value for member in ClientAuth)
        raise _FieldError(
            "tls_server_config.client_auth_type", f"invalid value {shown(name)} (one of {expected})"
        ) from None


def _tls_version(tls: Mapping[str, object], key: str, default: ssl.TLSVersion) -> ssl.TLSVersion:
    name = _optional(tls, "tls_server_config", key, str)
    if name is None:
        return default
    if name not in TLS_VERSIONS:
        raise _FieldError(
            f"tls_server_config.{key}",
            f"unknown TLS version {shown(name)} (one of {', '.join(TLS_VERSIONS)})",
        )
    return TLS_VERSIONS[name]


def _names(tls: Mapping[str, object], key: str, known: frozenset[str]) -> tuple[str, ...]:
    where = f"tls_server_config.{key}"
    raw = tls.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _FieldError(where, "must be a list")
    for index, name in enumerate(raw):
        if not isinstance(name, str) or name not in known:
            raise _FieldError(f"{where}[{index}]", f"unknown name {shown(name)}")
    return tuple(raw)


def _parse_users(raw: object) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _FieldError("basic_auth_users", "must be a mapping of user to bcrypt hash")
    users = {}
    for user, hashed in raw.items():
        if not isinstance(user, str):
            raise _FieldError(_path("basic_auth_users", user), "user name must be a string")
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None or not 4 <= int(match["cost"]) <= 31:
            raise _FieldError(_path("basic_auth_users", user), "not a bcrypt hash")
        users[user] = hashed.encode("ascii")
    return users


def _parse_headers(raw: object) -> dict[str, str]:
    where = "http_server_config.headers"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _FieldError(where, "must be a mapping of header to value")
    for name, value in raw.items():
        if name not in _EXTRA_HEADERS:
            raise _FieldError(_path(where, name), "this HTTP header can not be configured")
        if not isinstance(value, str):
            raise _FieldError(f"{where}.{name}", "must be a string")
        _text(value, f"{where}.{name}")
        # Sent on every response: a control character would fail each one at runtime.
        if not value.isprintable():
            raise _FieldError(f"{where}.{name}", "must not contain control characters")
        allowed = _EXTRA_HEADERS[name]
        if allowed and value not in allowed:
            raise _FieldError(
                f"{where}.{name}", f"expected one of {list(allowed)}, got {shown(value)}"
            )
    return dict(raw)


def _parse_rate_limit(raw: object) -> RateLimit | None:
    section = _mapping(raw, "rate_limit", {"burst", "interval"})
    interval = _optional(section, "rate_limit", "interval", str)
    seconds = _go_duration_seconds(interval, "rate_limit.interval") if interval else 0.0
    if seconds == 0.0:
        return None  # exporter-toolkit: no interval, no limiter
    burst = _optional(section, "rate_limit", "burst", int) or 0
    if burst < 1:
        raise _FieldError("rate_limit.burst", "must be at least 1 when an interval is set")
    return RateLimit(burst=burst, interval_seconds=seconds)


def _go_duration_seconds(text: str, where: str) -> float:
    """Parse a Go duration ("1s", "1m30s", "250ms"); "0" is allowed, negatives are not."""
    if text == "0":
        return 0.0
    if not re.fullmatch(f"(?:{_GO_DURATION_PART.pattern})+", text):
        raise _FieldError(where, f"invalid duration {shown(text)} (e.g. 1s, 250ms, 1m30s)")
    return sum(
        float(number) * _GO_DURATION_UNITS[unit] for number, unit in _GO_DURATION_PART.findall(text)
    )


def _mapping(raw: object, where: str, allowed: set[str]) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _FieldError(where or "(top level)", "must be a mapping")
    for key in raw:
        if key not in allowed:
            raise _FieldError(_path(where, key), "unknown field")
    return raw


def _path(where: str, key: object) -> str:
    """`where.key`, the key bounded: a key comes from the file and may be anything."""
    name = key if isinstance(key, str) and len(key) <= 80 else shown(key)
    return f"{where}.{name}" if where else name


def _optional(section: Mapping[str, object], where: str, key: str, kind: type[_T]) -> _T | None:
    value = section.get(key)
    # bool is an int in Python; YAML's `true` must not pass as a number.
    if isinstance(value, str) and kind is str:
        return _text(value, f"{where}.{key}")  # type: ignore[return-value]
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise _FieldError(f"{where}.{key}", f"must be a {kind.__name__}, got {shown(value)}")


def _text(value: str, where: str) -> str:
    """A string the file gives: no NUL (not in a path, nor in PEM) and no lone surrogate
    (YAML's "\\ud800" escape, which no file or TLS library can encode)."""
    if "\0" in value:
        raise _FieldError(where, "must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _FieldError(where, "is not valid Unicode text (a lone surrogate)") from None
    return value


def _parse_basic_auth(header_value: str | None) -> tuple[str, bytes] | None:
    """Split `Basic base64(user:password)`; None when absent or malformed."""
    if not header_value:
        return None
    scheme, _, encoded = header_value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
        user, sep, password = decoded.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except ValueError:  # not base64 (binascii.Error), not ASCII, or a user not UTF-8
        return None
