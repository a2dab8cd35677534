"""Values read from a Prometheus text exposition, for the benchmarks that scrape a daemon.

Only `re`: `bench.real_gpu` imports it on a GPU machine that has the daemons' own wheels and
nothing more.
"""

import re


def metric_value(text: str, name: str) -> float | None:
    """The value of the first sample of `name` in a text exposition, or None."""
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)", text, re.MULTILINE)
    return float(match.group(1)) if match else None
