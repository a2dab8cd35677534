"""Smoke test of the pod-resources List benchmark: every client runs and is reported.

Measured, not asserted: no CPU or memory figure is checked, only that each client made
its calls against the fake kubelet and got the same reply.
"""

from helpers.bench import run_bench


def test_every_client_is_reported() -> None:
    result = run_bench("podresources_call", "--calls", "3", "--rounds", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    for client in (
        "| grpcio, channel kept (the exporter before) |",
        "| h2, a connection per call (the exporter now) |",
        "| h2, one connection kept |",
    ):
        assert client in result.stdout
    assert "bytes, the same for every client;" in result.stdout
