"""The `gpufleet` command: one entry point, one subcommand per daemon or tool."""

import sys
from collections.abc import Sequence

USAGE = """usage: gpufleet <command> [options]

commands:
  exporter   serve GPU metrics (a drop-in for NVIDIA's dcgm-exporter)
  plugin     advertise GPUs to the kubelet (a drop-in for NVIDIA's k8s-device-plugin)
  autoscaler scale GPU workloads (GPUAutoscaler resources) from Prometheus signals
  lab        run the whole stack on simulated GPU nodes, with Prometheus and a web page
  simulate   replay a request trace through the autoscaling policies in a simulated cluster

Run 'gpufleet <command> --help' for the command's options. A command line that begins
with an option is the exporter's: dcgm-exporter's image takes its options alone, and its
chart passes them so.
"""
COMMANDS = ("exporter", "plugin", "autoscaler", "lab", "simulate", "version")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:  # Ctrl-C before a daemon's own handler is in place
        return 130


def _dispatch(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    if args[0].startswith("-") and args[0] != "--version":
        args = ["exporter", *args]
    command, rest = args[0], args[1:]
    if command == "exporter":
        from gpufleet.exporter.daemon import main as run
    elif command == "plugin":
        from gpufleet.plugin.daemon import main as run
    elif command == "autoscaler":
        from gpufleet.autoscaler.daemon import main as run
    elif command == "lab":
        from gpufleet.lab.main import main as run
    elif command == "simulate":
        from gpufleet.autoscaler.replay.main import main as run
    elif command in ("--version", "version"):
        from gpufleet import __version__

        print(f"gpufleet {__version__}")
        return 0
    else:
        from gpufleet.core.messages import did_you_mean

        hint = did_you_mean(command, COMMANDS)
        print(
            f"gpufleet: unknown command {command!r}{hint}; run 'gpufleet --help' for the commands",
            file=sys.stderr,
        )
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
