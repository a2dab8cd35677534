"""Real Prometheus and Alertmanager (Debian's binaries) for the lab, as child processes.

Prometheus scrapes every target the lab lists in file_sd files under one folder (the
exporters, the plugins, the serving pods, the autoscaler) and evaluates `rules/`; it sends
alerts to Alertmanager when that is installed. Nothing is fetched: both bind loopback only.
"""

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpufleet.core.messages import cut
from gpufleet.ports import check_bindable

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for the binary


class LabProcessError(Exception):
    """A part of the lab (a child process, a node's plugin) could not start; the message
    says which and why."""


def check_free(host: str, port: int, flag: str) -> None:
    """Raise OSError naming `flag` when host:port is taken (a child's own error would be
    buried in its log, after the lab said it runs)."""
    try:
        check_bindable(host, port)
    except OSError as err:
        raise OSError(f"{flag}: cannot listen on {host}:{port}: {err.strerror}") from None


def write_targets(path: Path, targets: list[str], labels: dict[str, str] | None = None) -> None:
    """A file_sd file of `targets`, written atomically (Prometheus never reads half)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": targets, "labels": labels or {}}]))
    tmp.replace(path)


class Child:
    """A child process with its output in a log file; `stop` ends it."""

    def __init__(self, argv: list[str], log_file: Path, *, url: str, name: str) -> None:
        self.url, self.name, self.log_file = url, name, log_file
        with log_file.open("w") as log:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def wait_ready(
        self,
        path: str,
        timeout_seconds: float = 30.0,
        *,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        """Poll `url + path` until it answers 200; raise LabProcessError if the child exits
        or does not answer in time. Returns, ready or not, as soon as `stopped()` is true."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if stopped():
                return
            if self._proc.poll() is not None:
                # Its log's last line says why: the log goes with the lab's temporary
                # directory, so "see prometheus.log" named a file gone by the time it is read.
                raise LabProcessError(
                    f"{self.name} exited with code {self._proc.returncode}: {self.last_words()}"
                )
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise LabProcessError(f"{self.name} did not answer at {self.url} (see {self.log_file})")

    def last_words(self, limit: int = 500) -> str:
        """The last non-empty line of its log, at most `limit` characters."""
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError as err:
            return f"(its log {self.log_file}: {err.strerror})"
        return cut(next((x.strip() for x in reversed(lines) if x.strip()), "(no output)"), limit)

    def exit_code(self) -> int | None:
        """Its exit code once it has exited; None while it runs."""
        return self._proc.poll()

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def start_prometheus(
    workdir: Path,
    *,
    host: str,
    port: int,
    targets_dir: Path,
    rule_files: list[Path],
    scrape_seconds: float,
    alertmanager: str = "",
) -> Child:
    """Prometheus scraping every `targets_dir/*.json` each `scrape_seconds`, with `rule_files`
    and, if given, alerts sent to `alertmanager` (host:port)."""
    config = workdir / "prometheus.yml"
    interval = f"{round(scrape_seconds * 1000)}ms"  # Prometheus reads no "3.3s"
    document: dict = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {
                # the serving pods'; the lab's own parts set theirs, as the chart names them
                "job_name": "serving",
                "file_sd_configs": [
                    {"files": [str(targets_dir / "*.json")], "refresh_interval": "1s"}
                ],
            }
        ],
    }
    if alertmanager:
        document["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]
        }
    config.write_text(json.dumps(document, indent=1))  # JSON is YAML
    return Child(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address={host}:{port}",
        ],
        workdir / "prometheus.log",
        url=f"http://{host}:{port}",
        name="prometheus",
    )


def start_alertmanager(workdir: Path, *, host: str, port: int) -> Child:
    """Alertmanager holding the alerts for its UI and API; it notifies no one (the lab has
    no receiver to page)."""
    config = workdir / "alertmanager.yml"
    config.write_text(json.dumps({"route": {"receiver": "lab"}, "receivers": [{"name": "lab"}]}))
    return Child(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            f"--web.listen-address={host}:{port}",
            "--cluster.listen-address=",  # no gossip port
        ],
        workdir / "alertmanager.log",
        url=f"http://{host}:{port}",
        name="alertmanager",
    )


def installed(binary: str) -> bool:
    return shutil.which(binary) is not None
