"""From the config file's text to plain data: YAML (or JSON) as NVIDIA's Go loader reads it.

Exists so that no text, however malformed or hostile, gets past here as anything but plain
data or one short ValueError: a bad explicit tag (`!!int x`), deep nesting or a timestamp
must not become a traceback. Timestamps stay strings, as they do in Go
(`version: 2023-13-01` is then an unknown version, not a crash).

Pure: no I/O.
"""

import json
from typing import Any

import yaml

# Error messages quote at most this much of the parser's own text.
_MAX_PROBLEM = 200
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with timestamps read as strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor(_TIMESTAMP, lambda loader, node: loader.construct_scalar(node))
# What PyYAML's constructors raise besides YAMLError for a bad explicit tag, and what deep
# nesting raises.
_LOAD_ERRORS = (ValueError, TypeError, AttributeError, LookupError, OverflowError, RecursionError)


def load_document(text: str) -> Any:
    """The document in `text`. Raises ValueError with one short line (the line and column
    when the parser knows them)."""
    # JSON first when it looks like JSON: PyYAML (YAML 1.1) rejects some valid JSON, e.g.
    # tab indentation.
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.reader.ReaderError as exc:  # a control character: two lines, no line number
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise ValueError(
            f"line {line}, column {column}: not valid YAML or JSON: control character "
            f"{chr(exc.character)!r} is not allowed"
            if isinstance(exc.character, int)
            else f"line {line}, column {column}: not valid YAML or JSON: {exc.reason}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"{where}not valid YAML or JSON: {problem[:_MAX_PROBLEM]}") from None
    except _LOAD_ERRORS as exc:
        raise ValueError(f"not valid YAML or JSON: {str(exc)[:_MAX_PROBLEM]}") from None
