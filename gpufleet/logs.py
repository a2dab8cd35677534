"""Logging setup shared by the daemons: one line per event, as text or JSON.

Daemons log through stdlib `logging` with module loggers; structured context goes in
`extra={"fields": {...}}` and is rendered as key=value pairs (text) or object keys (json).
"""

import json
import logging
import sys
import time


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = f"{stamp}Z {record.levelname:<7} {record.name}: {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            obj["error"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup_logging(*, debug: bool, json_format: bool) -> None:
    """Route all logs to stderr in the chosen format (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if json_format else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    # aiohttp's access log (the autoscaler's external metrics API, the lab's servers) would
    # add a line per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
