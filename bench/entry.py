"""How a benchmark that prints a report ends: with its exit code, also when the reader of
its output goes away early (`python3 -m bench.sim_minutes ... | head`), which would
otherwise end in a BrokenPipeError traceback."""

import os
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_with(main: Callable[[], int | None]) -> NoReturn:
    """Exit with `main()`'s code; quietly with 141 (SIGPIPE's shell status) when stdout's
    reader has closed it."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's advice: point stdout at /dev/null, or the flush at exit raises again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    sys.exit(code)
