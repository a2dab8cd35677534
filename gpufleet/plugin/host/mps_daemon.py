"""Whether a resource's MPS control daemon answers, asked as NVIDIA's plugin asks before it
registers an MPS resource: Allocate hands containers the daemon's pipe directory, and a pod
admitted to a pipe nobody serves fails inside CUDA.

NVIDIA's `Daemon.AssertHealthy` (cmd/mps-control-daemon/mps/daemon.go) runs
`nvidia-cuda-mps-control` with only `CUDA_MPS_PIPE_DIRECTORY` and `CUDA_MPS_LOG_DIRECTORY`
set to `/mps/<resource>/{pipe,log}` (the MPS root as mounted in the plugin's container),
writes `get_default_active_thread_percentage` to its stdin, and takes a zero exit as an
answer. This does the same, with a timeout, and never raises: it says what is wrong.
"""

import posixpath
import shutil
import subprocess

from gpufleet.plugin.core.allocate import MPS_CONTAINER_ROOT

MPS_CONTROL = "nvidia-cuda-mps-control"
QUERY = "get_default_active_thread_percentage"
# A daemon that is up answers at once; one that is not makes the command fail at once. The
# bound only keeps a wedged command from holding up registration for good.
TIMEOUT_SECONDS = 10.0


def mps_daemon_problem(
    resource: str, *, root: str = MPS_CONTAINER_ROOT, timeout_seconds: float = TIMEOUT_SECONDS
) -> str | None:
    """None when the MPS control daemon of `resource` answers; otherwise why not, in a
    phrase naming its pipe directory."""
    pipe_dir = posixpath.join(root, resource, "pipe")
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": pipe_dir,
        "CUDA_MPS_LOG_DIRECTORY": posixpath.join(root, resource, "log"),
    }
    binary = shutil.which(MPS_CONTROL)
    if binary is None:
        return f"{MPS_CONTROL} is not on PATH"
    try:
        run = subprocess.run(
            [binary],
            input=QUERY,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",  # whatever it prints, a reason to show, not a crash
            timeout=timeout_seconds,
        )
    except subprocess.TimeoutExpired:
        return f"{MPS_CONTROL} ({pipe_dir}) did not answer within {timeout_seconds:g} s"
    except OSError as exc:
        return f"cannot run {binary}: {exc}"
    if run.returncode != 0:
        said = (run.stderr or run.stdout).strip().splitlines()
        detail = f": {said[0][:200]}" if said else ""
        return f"{MPS_CONTROL} ({pipe_dir}) exited {run.returncode}{detail}"
    return None
