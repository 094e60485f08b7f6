"""The `retarget` command itself: help, version, error handling."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retarget import cli


def test_help_lists_commands(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "check" in out and "status" in out


def test_status_json(capsys):
    assert cli.main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status["rclpy"] is True and status["retarget_interfaces"] is True


@pytest.mark.integration
def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "retarget.cli", "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.startswith("retarget ")


def test_retarget_error_exits_2(capsys, monkeypatch):
    from retarget.errors import InputError

    def boom(args):
        raise InputError("bad thing in row 3")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    status = parser._subparsers._group_actions[0].choices["status"]
    status.set_defaults(func=boom)
    assert cli.main(["status"]) == 2
    assert "bad thing in row 3" in capsys.readouterr().err


@pytest.mark.integration
def test_help_does_not_import_the_numerical_stack():
    """`retarget --help` (every command registered) stays light: the packages import their public names lazily
    (retarget._lazy), so neither numba, scipy, matplotlib, rclpy nor ray is loaded (measured 1.0 s -> 0.4 s)."""
    code = ("import contextlib, io, sys\nfrom retarget.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('numba', 'scipy', 'matplotlib', 'rclpy', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
