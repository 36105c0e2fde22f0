"""`triton-course`, the console script: every command reaches its module, `sync --check`
reports a drifted notebook and leaves it, and a wrong command gets a sentence."""
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.instructor import cli
from conftest import venv_env

SCRIPT = Path(sys.executable).parent / "triton-course"


def test_the_console_script_is_installed_and_lists_every_command():
    done = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, env=venv_env(), timeout=60)
    assert done.returncode == 0
    for command in ("grade", "bench", "sync", "distribute"):
        assert f"triton-course {command}" in done.stdout


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_is_its_modules_main(command, capsys):
    with pytest.raises(SystemExit) as ended:
        cli.main([command, "--help"])
    assert ended.value.code == 0 and f"triton-course {command}" in capsys.readouterr().out


def test_a_wrong_command_is_named(capsys):
    assert cli.main(["grades", "ps1_broadcast_add"]) == 2
    assert "no command 'grades'" in capsys.readouterr().err


def test_sync_writes_the_source_notebooks_before_the_student_versions_and_fails_when_any_fails(monkeypatch):
    from autograder import settings
    from autograder.instructor import student_versions, sync
    calls = []
    monkeypatch.setattr(sync, "main", lambda argv: calls.append(("notebooks", argv)) or 1)
    monkeypatch.setattr(student_versions, "main", lambda argv: calls.append(("students", argv)) or 0)
    monkeypatch.setattr(settings, "main", lambda argv: calls.append(("settings", argv)) or 0)
    assert cli.main(["sync", "--check"]) == 1
    assert calls == [("notebooks", ["--check"]), ("students", ["--check"]), ("settings", ["--check"])]
    calls.clear()
    assert cli.main(["sync"]) == 1 and calls == [("notebooks", []), ("students", []), ("settings", [])]
