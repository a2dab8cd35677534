"""How a benchmark that prints a report ends: with its exit code, also when the reader of
its output goes away early (`python3 -m bench.sim_minutes ... | head`), which would
otherwise end in a BrokenPipeError traceback, and when a simulated run never ends."""

import os
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_with(main: Callable[[], int | None]) -> NoReturn:
    """Exit with `main()`'s code; quietly with 141 (SIGPIPE's shell status) when stdout's
    reader has closed it; with 1 and one line naming the run (argparse's form) when a
    simulated run never ended."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's advice: point stdout at /dev/null, or the flush at exit raises again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except Exception as exc:
        if not _never_ended(exc):
            raise
        print(f"{os.path.basename(sys.argv[0])}: error: {exc}", file=sys.stderr)
        sys.exit(1)
    sys.exit(code)


def _never_ended(exc: Exception) -> bool:
    """Whether `exc` is the simulator's SimulationError. Looked up, not imported: a bench
    that never loaded the engine cannot have raised it (one from a worker process loads it
    as it is unpickled), and some benches measure their own memory."""
    engine = sys.modules.get("gpufleet.autoscaler.replay.core.engine")
    return engine is not None and isinstance(exc, engine.SimulationError)
