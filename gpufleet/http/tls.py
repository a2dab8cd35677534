"""The TLS half of the web config: Go's TLS vocabulary and the server's `ssl.SSLContext`.

Exists so `webconfig` can stay about the file (keys, strictness, basic auth) while this module
owns what exporter-toolkit's `tls_server_config` means to OpenSSL: Go's version, cipher-suite,
curve and client-auth names, and loading the certificate, key and client CAs. Python's ssl
cannot request a client certificate without verifying it, so `RequireAnyClientCert` also
verifies and `RequestClientCert` asks for none; curve names are known but OpenSSL's default
groups are used.

Never log or repr an inline key, and never write one anywhere but a private temporary
directory that is removed before `build_ssl_context` returns. Reads no other file than the
ones the config names.
"""

import os
import ssl
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class ClientAuth(StrEnum):
    """exporter-toolkit's `client_auth_type` values (Go's tls.ClientAuthType names)."""

    NO_CLIENT_CERT = "NoClientCert"
    REQUEST_CLIENT_CERT = "RequestClientCert"
    REQUIRE_ANY_CLIENT_CERT = "RequireAnyClientCert"
    VERIFY_CLIENT_CERT_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY_CLIENT_CERT = "RequireAndVerifyClientCert"


CLIENT_AUTH_ALIASES = {
    "": ClientAuth.NO_CLIENT_CERT,
    "RequireClientCert": ClientAuth.REQUIRE_ANY_CLIENT_CERT,
}

# RequestClientCert never verifies and we never read an unverified certificate, so not
# asking for one behaves the same; see the module docstring for RequireAnyClientCert.
_VERIFY_MODES = {
    ClientAuth.NO_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuth.REQUEST_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuth.REQUIRE_ANY_CLIENT_CERT: ssl.CERT_REQUIRED,
    ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT: ssl.CERT_REQUIRED,
}

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's cipher suite names (tls.CipherSuites(), plus the RSA key-exchange suites older Go
# releases listed there) -> OpenSSL names. TLS 1.3 suites are not configurable in Go
# either: accepted and ignored.
_CIPHERS_TLS12 = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
_CIPHERS_TLS13 = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
CIPHER_SUITES = frozenset(_CIPHERS_TLS12) | _CIPHERS_TLS13
"""Every Go cipher suite name a config may list."""
CURVES = frozenset({"CurveP256", "CurveP384", "CurveP521", "X25519"})
"""Every Go curve name a config may list (checked, then left to OpenSSL's defaults)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsServerConfig:
    """`tls_server_config`, with paths already resolved against the file's directory."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None  # inline PEM
    key: str | None = field(default=None, repr=False)  # inline PEM
    client_auth_type: ClientAuth = ClientAuth.NO_CLIENT_CERT
    client_ca_file: Path | None = None
    client_ca: str | None = None  # inline PEM
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    cipher_suites: tuple[str, ...] = ()  # Go names, as written
    curve_preferences: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True


class TlsSetupError(Exception):
    """A TLS setting or file cannot be used; `key_path` names the web config key at fault."""

    def __init__(self, key_path: str, problem: str) -> None:
        super().__init__(f"{key_path}: {problem}")
        self.key_path = key_path
        self.problem = problem


def build_ssl_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """The server's SSLContext, reading the certificate, key and client-CA files.

    Raises TlsSetupError when a version range, cipher list or file is unusable.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if tls.min_version > tls.max_version:
        raise TlsSetupError("tls_server_config.min_version", "is above max_version")
    context.minimum_version = tls.min_version
    context.maximum_version = tls.max_version
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [_CIPHERS_TLS12[name] for name in tls.cipher_suites if name in _CIPHERS_TLS12]
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError as exc:
            raise TlsSetupError("tls_server_config.cipher_suites", str(exc)) from None
    _load_certificate(context, tls)
    context.verify_mode = _VERIFY_MODES[tls.client_auth_type]
    if context.verify_mode != ssl.CERT_NONE:
        _load_client_cas(context, tls)
    return context


def _load_certificate(context: ssl.SSLContext, tls: TlsServerConfig) -> None:
    for key, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
        if path is not None and not os.access(path, os.R_OK):
            raise TlsSetupError(f"tls_server_config.{key}", f"cannot read {path}")
        if path is not None and os.path.isdir(path):  # readable, and "[Errno 21]" from ssl
            raise TlsSetupError(f"tls_server_config.{key}", f"{path} is a directory")
    # ssl only loads certificates from files: inline PEM goes through a private temp dir.
    with tempfile.TemporaryDirectory(prefix="gpufleet-tls-") as private_dir:
        cert = tls.cert_file or _write_private(Path(private_dir) / "cert.pem", tls.cert)
        key = tls.key_file or _write_private(Path(private_dir) / "key.pem", tls.key)
        try:
            # An empty password makes an encrypted key fail instead of prompting on a TTY.
            context.load_cert_chain(cert, key, password=b"")
        except ssl.SSLError as exc:
            raise TlsSetupError(
                "tls_server_config",
                f"cannot load the certificate and key ({tls.cert_file or 'inline cert'}, "
                f"{tls.key_file or 'inline key'}): {exc}",
            ) from None


def _write_private(path: Path, pem: str | None) -> Path:
    path.write_text(pem or "", encoding="utf-8")
    return path


def _load_client_cas(context: ssl.SSLContext, tls: TlsServerConfig) -> None:
    try:
        if tls.client_ca_file is not None:
            context.load_verify_locations(cafile=tls.client_ca_file)
        elif tls.client_ca is not None:
            context.load_verify_locations(cadata=tls.client_ca)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # as Go with no ClientCAs
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        key = "client_ca_file" if tls.client_ca_file is not None else "client_ca"
        raise TlsSetupError(f"tls_server_config.{key}", f"cannot load client CAs: {exc}") from None
