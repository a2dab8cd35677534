"""A server context that follows its files, over real TLS handshakes on loopback: a renewed
certificate is served without a restart, and a pair caught half rewritten is not."""

import asyncio
import logging
import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from helpers.clock import ManualClock
from helpers.pki import issue, swap_in, write_pair

from gpufleet.http.tls_reload import CHECK_SECONDS, ReloadingContext
from gpufleet.http.webconfig import load_web_config

SERVER = ExtendedKeyUsageOID.SERVER_AUTH


def _swap_in(mounted: Path, fresh: Path) -> None:
    swap_in((fresh / name, mounted / name) for name in ("tls.crt", "tls.key"))


def _issue_into(directory: Path, name: str, ca) -> x509.Certificate:
    directory.mkdir(exist_ok=True)
    pair = issue(name, issuer=ca, usage=SERVER)
    cert, key = write_pair(directory, "tls", pair)
    cert.rename(directory / "tls.crt")
    key.rename(directory / "tls.key")
    return pair[0]


def _builder(directory: Path) -> Callable[[], ssl.SSLContext]:
    def build() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        return context

    return build


async def _served_serial(context: ssl.SSLContext) -> int:
    async def answer(_reader, writer) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    return x509.load_der_x509_certificate(der).serial_number


def _reloading(mounted: Path, clock: ManualClock) -> ReloadingContext:
    """A context following `mounted`'s tls.crt and tls.key."""
    return ReloadingContext(
        _builder(mounted), [mounted / "tls.crt", mounted / "tls.key"], clock=clock
    )


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.http.tls_reload")
    ca = issue("ca")
    mounted = tmp_path / "mounted"
    first = _issue_into(mounted, "first", ca)
    clock = ManualClock()
    reloading = _reloading(mounted, clock)
    assert await _served_serial(reloading.context) == first.serial_number
    renewed = _issue_into(tmp_path / "renewed", "renewed", ca)
    _swap_in(mounted, tmp_path / "renewed")
    # Looked at once a second at most: within it, the handshake keeps the last context.
    assert await _served_serial(reloading.context) == first.serial_number
    clock.advance(CHECK_SECONDS)
    assert await _served_serial(reloading.context) == renewed.serial_number
    assert "TLS certificate reloaded" in caplog.text


async def test_a_pair_that_does_not_load_keeps_the_last_good_one(tmp_path: Path, caplog) -> None:
    ca = issue("ca")
    mounted = tmp_path / "mounted"
    first = _issue_into(mounted, "first", ca)
    clock = ManualClock()
    reloading = _reloading(mounted, clock)
    other = tmp_path / "other"
    _issue_into(other, "other", ca)
    shutil.copy(other / "tls.crt", mounted / "tls.crt")  # the certificate, not yet its key
    for _ in range(3):
        clock.advance(CHECK_SECONDS)
        assert await _served_serial(reloading.context) == first.serial_number
    assert caplog.text.count("do not load") == 1  # once per change, not per handshake


async def test_a_change_of_state_rebuilds_too(tmp_path: Path) -> None:
    """A client CA read from the API, say: no file changes, the context still follows."""
    ca = issue("ca")
    mounted = tmp_path / "mounted"
    _issue_into(mounted, "first", ca)
    state = ["one"]
    builds: list[str] = []

    def build() -> ssl.SSLContext:
        builds.append(state[0])
        return _builder(mounted)()

    clock = ManualClock()
    reloading = ReloadingContext(build, [], state=lambda: state[0], clock=clock)
    state[0] = "two"
    clock.advance(CHECK_SECONDS)
    await _served_serial(reloading.context)
    assert builds == ["one", "two"]


async def test_a_web_configs_certificate_files_are_followed(tmp_path: Path) -> None:
    """exporter-toolkit builds its TLS config per handshake, so a renewed Secret is served;
    the exporter's and the plugin's web config read the files once, until they expired."""
    ca = issue("ca")
    mounted = tmp_path / "mounted"
    first = _issue_into(mounted, "first", ca)
    config = mounted / "web-config.yml"
    config.write_text("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")
    context = load_web_config(config).ssl_context()
    assert context is not None
    assert await _served_serial(context) == first.serial_number
    renewed = _issue_into(tmp_path / "renewed", "renewed", ca)
    _swap_in(mounted, tmp_path / "renewed")
    for _ in range(100):  # until a second has passed since the last look
        if await _served_serial(context) == renewed.serial_number:
            break
        await asyncio.sleep(0.1)
    assert await _served_serial(context) == renewed.serial_number
