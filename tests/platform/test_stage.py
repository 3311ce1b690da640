"""scripts/stage.sh, the runner behind ``make demo``'s one line per stage: quiet on
success, the log's path and tail on failure, the command's exit code kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

STAGE = Path(__file__).parents[2] / "scripts" / "stage.sh"
NOISY = "for i in $(seq 1 200); do echo pip line $i; done"


def stage(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(STAGE), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)


def test_success_is_one_line_and_the_output_is_in_the_log(tmp_path: Path) -> None:
    done = stage(tmp_path, "Installing the dev venv", "bash", "-c", NOISY)
    assert done.returncode == 0
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("ok    Installing the dev venv (")
    log = tmp_path / ".mol" / "logs" / "installing-the-dev-venv.log"
    text = log.read_text()
    assert "pip line 1\n" in text
    assert "pip line 200\n" in text


def test_failure_prints_the_log_path_and_its_tail_and_keeps_the_exit_code(
        tmp_path: Path) -> None:
    done = stage(tmp_path, "Console assets", "bash", "-c", f"{NOISY}; echo 'npm ERR! gone' >&2; "
                 "exit 7")
    assert done.returncode == 7
    assert done.stdout == ""
    err = done.stderr.splitlines()
    assert err[0] == ("FAIL  Console assets (exit 7 after 0s); full log: "
                      ".mol/logs/console-assets.log")
    assert "npm ERR! gone" in err  # stderr of the command is in the tail
    assert "pip line 200" in err
    assert "pip line 162" in err
    assert "pip line 161" not in err  # ... and no more
    assert (tmp_path / ".mol/logs/console-assets.log").read_text().count("pip line") == 200


def test_stdout_to_a_file_for_the_caller(tmp_path: Path) -> None:
    done = stage(tmp_path, "-o", "path.txt", "Engine venv (first time ~3 min)", "bash", "-c",
                 "echo progress >&2; echo /opt/venv")
    assert done.returncode == 0
    assert (tmp_path / "path.txt").read_text() == "/opt/venv\n"
    # the log is named after the label without its note in parentheses
    assert "progress" in (tmp_path / ".mol/logs/engine-venv.log").read_text()
    assert done.stdout.count("\n") == 1


def test_the_log_folder_and_tail_length_are_settings(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(STAGE), "x", "bash", "-c", f"{NOISY}; exit 1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", "MOL_STAGE_LOG_DIR": "logs",
                                            "MOL_STAGE_TAIL": "3"})
    assert done.returncode == 1
    assert "full log: logs/x.log" in done.stderr
    assert "pip line 198" in done.stderr
    assert "pip line 197" not in done.stderr


def test_a_missing_command_is_a_usage_error(tmp_path: Path) -> None:
    done = stage(tmp_path, "only a label")
    assert done.returncode == 2
    assert "usage: scripts/stage.sh" in done.stderr
