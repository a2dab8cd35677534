"""The web config file: exporter-toolkit's keys and strictness, TLS contexts, basic auth."""

import base64
import datetime
import logging
import re
import ssl
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.http.tls import ClientAuth
from gpufleet.http.webconfig import (
    RateLimit,
    WebConfigError,
    load_web_config,
    parse_web_config,
)


def self_signed_pem() -> tuple[str, str]:
    """A throwaway self-signed certificate and its key, as PEM text."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpufleet-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


@pytest.fixture(scope="module")
def pem() -> tuple[str, str]:
    return self_signed_pem()


@pytest.fixture
def tls_dir(tmp_path: Path, pem: tuple[str, str]) -> Path:
    """A config directory holding server.crt, server.key and ca.crt."""
    cert, key = pem
    (tmp_path / "server.crt").write_text(cert)
    (tmp_path / "server.key").write_text(key)
    (tmp_path / "ca.crt").write_text(cert)
    return tmp_path


def write_config(directory: Path, text: str) -> Path:
    path = directory / "web-config.yml"
    path.write_text(text)
    return path


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


FULL_CONFIG = """
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    Strict-Transport-Security: max-age=31536000
rate_limit:
  burst: 5
  interval: 1m30s
basic_auth_users:
  alice: $2b$04$B/wlg7sEqIJZm9aUnS4Kbe6ElbvJBGaeTGEqwRqA4BQ6iCEQhGZce
"""


def test_full_config_parses_every_field(tls_dir: Path) -> None:
    config = load_web_config(write_config(tls_dir, FULL_CONFIG))

    assert config.tls is not None
    assert config.tls.cert_file == tls_dir / "server.crt"  # relative to the file's directory
    assert config.tls.key_file == tls_dir / "server.key"
    assert config.tls.client_ca_file == tls_dir / "ca.crt"
    assert config.tls.client_auth_type is ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT
    assert config.tls.min_version == config.tls.max_version == ssl.TLSVersion.TLSv1_3
    assert config.tls.cipher_suites == (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_AES_128_GCM_SHA256",
    )
    assert config.tls.prefer_server_cipher_suites is False
    assert dict(config.headers) == {
        "X-Frame-Options": "deny",
        "Strict-Transport-Security": "max-age=31536000",
    }
    assert config.rate_limit == RateLimit(burst=5, interval_seconds=90.0)
    assert set(config.basic_auth_users) == {"alice"}
    assert config.auth_required


def test_secrets_stay_out_of_repr(tmp_path: Path, pem: tuple[str, str]) -> None:
    cert, key = pem
    key_yaml = "\n".join("    " + line for line in key.splitlines())
    cert_yaml = "\n".join("    " + line for line in cert.splitlines())
    text = f"tls_server_config:\n  cert: |\n{cert_yaml}\n  key: |\n{key_yaml}\n" + (
        "basic_auth_users:\n  alice: $2b$04$B/wlg7sEqIJZm9aUnS4Kbe6ElbvJBGaeTGEqwRqA4BQ6iCEQhGZce\n"
    )
    config = parse_web_config(text, source=tmp_path / "web.yml")

    assert config.tls is not None and config.tls.key == key
    assert "PRIVATE KEY" not in repr(config)
    assert "$2b$" not in repr(config)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "tls_server_config:\n"])
def test_empty_config_is_plain_http_without_auth(tmp_path: Path, text: str) -> None:
    config = load_web_config(write_config(tmp_path, text))

    assert config.tls is None
    assert config.ssl_context() is None
    assert not config.auth_required
    assert config.check_basic_auth(None)
    assert config.rate_limit is None


INVALID = [
    ("tls_config:\n  cert_file: x\n", "tls_config: unknown field", "unknown-top-level-key"),
    (
        "tls_server_config:\n  certfile: x\n",
        "tls_server_config.certfile: unknown field",
        "unknown-nested-key",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n",
        "tls_server_config.client_auth_type: invalid value 'Sometimes'",
        "bad-client-auth-type",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: 12\n",
        "tls_server_config.min_version: must be a str",
        "wrong-type",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  max_version: TLS14\n",
        "tls_server_config.max_version: unknown TLS version 'TLS14'",
        "unknown-tls-version",
    ),
    (
        "tls_server_config:\n  cert_file: a\n",
        "tls_server_config: missing one of key or key_file",
        "cert-without-key",
    ),
    (
        "tls_server_config:\n  key_file: a\n",
        "tls_server_config: missing one of cert or cert_file",
        "key-without-cert",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
        "client CAs are configured without a client_auth_type",
        "client-ca-without-auth",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_RC4]\n",
        "tls_server_config.cipher_suites[0]: unknown name 'TLS_RC4'",
        "unknown-cipher",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [P999]\n",
        "tls_server_config.curve_preferences[0]: unknown name 'P999'",
        "unknown-curve",
    ),
    (
        "tls_server_config:\n  cert_file: a\n  key_file: b\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [x]\n",
        "tls_server_config.client_allowed_sans: not supported",
        "client-allowed-sans",
    ),
    (
        "http_server_config:\n  headers:\n    Content-Type: text/html\n",
        "http_server_config.headers.Content-Type: this HTTP header can not be configured",
        "header-not-allowed",
    ),
    (
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        "http_server_config.headers.X-Frame-Options: expected one of ['deny', 'sameorigin']",
        "header-bad-value",
    ),
    (
        "http_server_config:\n  http2: maybe\n",
        "http_server_config.http2: must be a bool",
        "http2-not-bool",
    ),
    (
        "basic_auth_users:\n  alice: secret\n",
        "basic_auth_users.alice: not a bcrypt hash",
        "plain-pw",
    ),
    ("basic_auth_users: [alice]\n", "basic_auth_users: must be a mapping", "users-not-mapping"),
    (
        "basic_auth_users:\n  alice: $2b$04$B/wlg7sEqIJZm9aUnS4Kbe6ElbvJBGaeTGEqwRqA4BQ6iCEQhGZce\n"
        "  alice: $2b$04$B/wlg7sEqIJZm9aUnS4Kbe6ElbvJBGaeTGEqwRqA4BQ6iCEQhGZce\n",
        "duplicate key 'alice'",
        "duplicate-user",
    ),
    ("rate_limit:\n  burst: 1\n  interval: soon\n", "rate_limit.interval: invalid duration", "dur"),
    ("rate_limit:\n  interval: 1s\n", "rate_limit.burst: must be at least 1", "burst-zero"),
    ("- tls_server_config\n", "(top level): must be a mapping", "top-level-list"),
    ("tls_server_config: [\n", ":2:1: invalid YAML: expected the node content", "yaml-syntax"),
    # issue 15: each of these raised a bare Python exception (a traceback at startup)
    ("[a]: b\n", ":1:1: invalid YAML: a mapping key must be a scalar", "list-as-key"),
    ("? {a: 1}\n: b\n", ":1:3: invalid YAML: a mapping key must be a scalar", "map-as-key"),
    ("rate_limit: !!timestamp x\n", ":1:13: invalid YAML: 'x' is not a valid timestamp", "ts"),
    (
        "rate_limit: 2023-13-01\n",
        "'2023-13-01' is not a valid timestamp (month must be in 1..12)",
        "bad-date",
    ),
    ("rate_limit: !!set x\n", "invalid YAML: expected a mapping node", "set-of-scalar"),
    ("rate_limit:\n  burst: !!int x\n", ":2:10: invalid YAML: 'x' is not a valid int", "int"),
    ("rate_limit: !!float 1e999999\n", "rate_limit: must be a mapping", "float-overflow"),
    (
        'tls_server_config:\n  cert_file: "a\\0b"\n  key_file: k\n',
        "tls_server_config.cert_file: must not contain a NUL character",
        "nul-in-path",
    ),
    (
        'tls_server_config:\n  cert: "\\ud800"\n  key: k\n',
        "tls_server_config.cert: is not valid Unicode text",
        "lone-surrogate",
    ),
    (
        'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: x"\n',
        "http_server_config.headers.X-XSS-Protection: must not contain control characters",
        "header-injection",
    ),
    ("[" * 2000 + "\n", "invalid YAML: nested too deeply", "deep-nesting"),
    (
        "rate_limit:\n  interval: 1s\n  burst:\n"
        '    - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(f"    - &a{i} [{','.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)),
        "rate_limit.burst: must be a int, got [[",
        "alias-bomb",
    ),
    ("? " + "x" * 100_000 + "\n: 1\n", "xxx': unknown field", "huge-key"),
]


@pytest.mark.parametrize(
    ("text", "message"), [row[:2] for row in INVALID], ids=[r[2] for r in INVALID]
)
def test_invalid_config_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write_config(tmp_path, text)

    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)

    assert str(caught.value).startswith(f"{path}:")
    assert message in str(caught.value)
    # One bounded line, whatever the file (issue 15: a 447-byte file gave a 358 MB message).
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent.yml"

    with pytest.raises(WebConfigError, match=re.escape(f"{path}: cannot read the web config file")):
        load_web_config(path)


@pytest.mark.parametrize("key", ["cert_file", "key_file"])
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("gone.pem", "cannot read {path}"),
        # readable, so it passed the check above, and ssl said only "[Errno 21] Is a
        # directory"
        ("certs", "{path} is a directory"),
    ],
    ids=["missing", "a-directory"],
)
def test_a_certificate_file_that_cannot_be_loaded_is_named(
    tls_dir: Path, key: str, given: str, said: str
) -> None:
    (tls_dir / "certs").mkdir(exist_ok=True)
    files = {"cert_file": "server.crt", "key_file": "server.key"} | {key: given}
    path = write_config(
        tls_dir, "tls_server_config:\n" + "".join(f"  {k}: {v}\n" for k, v in files.items())
    )

    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)

    assert f"tls_server_config.{key}: {said.format(path=tls_dir / given)}" in str(caught.value)


def test_invalid_certificate_pem_fails_at_load(tls_dir: Path) -> None:
    (tls_dir / "server.crt").write_text("not a certificate\n")
    path = write_config(
        tls_dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    )

    with pytest.raises(WebConfigError, match="cannot load the certificate and key"):
        load_web_config(path)


def test_unreadable_client_ca_fails_at_load(tls_dir: Path) -> None:
    (tls_dir / "ca.crt").write_text("garbage\n")
    path = write_config(
        tls_dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )

    with pytest.raises(
        WebConfigError, match=r"tls_server_config\.client_ca_file: cannot load client CAs"
    ):
        load_web_config(path)


def test_min_version_above_max_version_is_refused(tls_dir: Path) -> None:
    path = write_config(
        tls_dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  min_version: TLS13\n  max_version: TLS12\n",
    )

    with pytest.raises(WebConfigError, match="min_version: is above max_version"):
        load_web_config(path)


def test_inline_certificate_and_key_build_a_context(tmp_path: Path, pem: tuple[str, str]) -> None:
    cert, key = pem
    indent = "\n".join("    " + line for line in cert.splitlines())
    key_indent = "\n".join("    " + line for line in key.splitlines())
    path = write_config(
        tmp_path,
        f"tls_server_config:\n  cert: |\n{indent}\n  key: |\n{key_indent}\n"
        f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca: |\n{indent}\n",
    )

    context = load_web_config(path).ssl_context()

    assert context is not None
    assert context.verify_mode == ssl.CERT_OPTIONAL
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2  # exporter-toolkit's default


@pytest.mark.parametrize(
    ("client_auth", "verify_mode"),
    [
        ("NoClientCert", ssl.CERT_NONE),
        ("RequestClientCert", ssl.CERT_NONE),
        ("RequireAnyClientCert", ssl.CERT_REQUIRED),
        ("RequireClientCert", ssl.CERT_REQUIRED),
        ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
        ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_client_auth_type_sets_verify_mode(
    tls_dir: Path, client_auth: str, verify_mode: ssl.VerifyMode
) -> None:
    ca = "" if client_auth == "NoClientCert" else "  client_ca_file: ca.crt\n"
    path = write_config(
        tls_dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        f"  client_auth_type: {client_auth}\n{ca}",
    )

    context = load_web_config(path).ssl_context()

    assert context is not None
    assert context.verify_mode == verify_mode


def test_ignored_settings_are_noted_once_at_load(
    tls_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(
        tls_dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  curve_preferences: [X25519, CurveP256]\n",
    )

    with caplog.at_level(logging.WARNING, logger="gpufleet.http.webconfig"):
        load_web_config(path)

    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: tls_server_config.curve_preferences ignored"
    ]


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [("1s", 1.0), ("250ms", 0.25), ("1m30s", 90.0), ("1.5h", 5400.0), ("100us", 1e-4)],
    ids=["seconds", "millis", "compound", "fractional-hours", "micros"],
)
def test_rate_limit_interval_is_a_go_duration(
    tmp_path: Path, interval: str, seconds: float
) -> None:
    config = parse_web_config(
        f"rate_limit:\n  burst: 3\n  interval: {interval}\n", source=tmp_path / "w.yml"
    )

    assert config.rate_limit == RateLimit(burst=3, interval_seconds=pytest.approx(seconds))


def test_zero_rate_limit_interval_disables_the_limiter(tmp_path: Path) -> None:
    config = parse_web_config("rate_limit:\n  burst: 0\n  interval: '0'\n", source=tmp_path / "w")

    assert config.rate_limit is None


@pytest.fixture(scope="module")
def alice_hash() -> str:
    return bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def users_config(hashed: str) -> str:
    return f"basic_auth_users:\n  alice: '{hashed}'\n  bob: '{hashed}'\n"


BASIC_AUTH = [
    (basic("alice", "s3cret"), True, "right-password"),
    ("basic " + basic("alice", "s3cret")[6:], True, "scheme-case-insensitive"),
    (basic("alice", "wrong"), False, "wrong-password"),
    (basic("mallory", "s3cret"), False, "unknown-user-with-a-valid-password"),
    (basic("alice", "s3cret" + "x" * 80), False, "over-72-bytes-no-crash"),
    (None, False, "no-header"),
    ("", False, "empty-header"),
    ("Bearer abc", False, "other-scheme"),
    ("Basic !!!notbase64", False, "bad-base64"),
    ("Basic " + base64.b64encode(b"alice").decode(), False, "no-colon"),
    ("Basic " + base64.b64encode(b"\xff:s3cret").decode(), False, "user-not-utf8"),
    ("Basic \xe9", False, "not-ascii"),  # was a 500 from the server
]


@pytest.mark.parametrize(
    ("header", "ok"), [r[:2] for r in BASIC_AUTH], ids=[r[2] for r in BASIC_AUTH]
)
def test_check_basic_auth(tmp_path: Path, alice_hash: str, header: str | None, ok: bool) -> None:
    config = parse_web_config(users_config(alice_hash), source=tmp_path / "w.yml")

    assert config.check_basic_auth(header) is ok


def test_htpasswd_2y_hashes_are_accepted(tmp_path: Path, alice_hash: str) -> None:
    hashed = alice_hash.replace("$2b$", "$2y$", 1)
    config = parse_web_config(users_config(hashed), source=tmp_path / "w.yml")

    assert config.check_basic_auth(basic("alice", "s3cret"))


def test_verified_credentials_are_cached_per_password(tmp_path: Path, alice_hash: str) -> None:
    config = parse_web_config(users_config(alice_hash), source=tmp_path / "w.yml")
    good = basic("alice", "s3cret")

    assert not config.check_basic_auth_cached(good)
    assert config.check_basic_auth(good)
    assert config.check_basic_auth_cached(good)
    assert not config.check_basic_auth_cached(basic("alice", "other"))
    assert not config.check_basic_auth_cached(basic("bob", "s3cret"))
    assert not config.check_basic_auth(basic("alice", "other"))


def test_passwords_compare_on_their_first_72_bytes_as_in_go(tmp_path: Path) -> None:
    password = "p" * 72
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = parse_web_config(users_config(hashed), source=tmp_path / "w.yml")

    assert config.check_basic_auth(basic("alice", password + "ignored"))


_FUZZ_CONFIG = parse_web_config(
    users_config(bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()), source=Path("w.yml")
)


@given(
    st.text()
    | st.text().map("Basic ".__add__)
    | st.binary().map(lambda raw: "Basic " + base64.b64encode(raw).decode())
)
def test_any_authorization_header_is_a_yes_or_no(header: str) -> None:
    """The header comes from any client before it is authenticated: whatever it holds,
    the answer is a bool (a 401), never an exception (a 500)."""
    assert _FUZZ_CONFIG.check_basic_auth(header) in (True, False)
