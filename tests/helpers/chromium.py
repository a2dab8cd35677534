"""Headless Chromium on a page, as the lab's page tests drive it: its DOM after the page's
scripts ran, or a screenshot, and each <section>'s data-* attributes from that DOM."""

import subprocess
from html.parser import HTMLParser
from pathlib import Path

WINDOW = (1000, 800)


class Panels(HTMLParser):
    """Each <section>'s data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.sections[values["id"]] = values


def chromium(tmp_path: Path, url: str, *args: str) -> str:
    """Headless Chromium on `url` with the flags that work on a closed network."""
    result = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "--virtual-time-budget=15000",  # the page's fetches and first draw
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout
