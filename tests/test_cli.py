"""The `gpufleet` command: subcommand dispatch, and Ctrl-C before a daemon's own handler."""

import pytest

from gpufleet import cli


def test_an_unknown_command_is_one_line_and_exit_2(capsys):
    assert cli.main(["exportr"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'exportr'" in err


def test_ctrl_c_before_a_daemon_handles_it_exits_130_quietly(monkeypatch, capsys):
    """SIGINT while a daemon still imports (or before asyncio's handler is in place) was a
    KeyboardInterrupt traceback; it is the shell's 130 and nothing more."""

    def interrupted(_argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_dispatch", interrupted)
    assert cli.main(["exporter"]) == 130
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(argv, capsys):
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("gpufleet ")


@pytest.mark.parametrize("command", ["exporter", "plugin"])
def test_v_is_the_version_as_urfave_cli_has_it(command, capsys):
    """NVIDIA's two daemons answer -v (urfave/cli's version flag); a manifest's probe or
    script calling it was refused as an unknown argument."""
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "-v"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"gpufleet {command} ")


def test_options_alone_are_the_exporters(capsys):
    """dcgm-exporter's image takes its options alone, and its chart passes them so: with
    our image swapped in, `gpufleet -f FILE` was an unknown command, exit 2."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["-c", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufleet exporter: error:") and "100 ms minimum" in err


@pytest.mark.parametrize("argv", [["-h"], ["--help"]])
def test_help_alone_is_still_the_commands(argv, capsys):
    assert cli.main(argv) == 0
    assert "commands:" in capsys.readouterr().out
