"""Test certificates made on the fly with `cryptography`: no key is ever committed."""

import datetime
import ipaddress
import shutil
import ssl
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def issue(
    name: str,
    *,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA certificate when `issuer` is None, else a leaf for `usage` signed by it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    signer_cert, signer_key = issuer if issuer else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_cert.subject if signer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()),
            critical=False,
        )
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
    return builder.sign(signer_key, hashes.SHA256()), key


def write_pair(
    directory: Path, stem: str, pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
) -> tuple[Path, Path]:
    cert, key = pair
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def swap_in(pairs: Iterable[tuple[Path, Path]]) -> None:
    """As the kubelet updates a mounted Secret: each (source, target) pair's content appears
    at `target` at once, a new inode."""
    for source, target in pairs:
        staged = target.with_name(f".{target.name}.new")
        shutil.copy(source, staged)
        staged.replace(target)


def served_certificate(port: int) -> x509.Certificate:
    """What a TLS server on 127.0.0.1:`port` serves, read without verifying it."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode())
