"""What Kubernetes takes for a label value (apimachinery's `IsValidLabelValue`): at most 63
characters, empty or beginning and ending with a letter or digit, with `-`, `_` and `.`
between. One object with one value past it is refused whole."""

import re

LABEL_VALUE_MAX = 63
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def is_label_value(value: str) -> bool:
    """A value the API server takes for a label."""
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None
