"""The `mol` shell: help, component verbs through entry points, honest 'not built'."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from mol_platform.apps.cli import app, load_components

runner = CliRunner()


def _app() -> typer.Typer:
    load_components(app)
    return app


def test_help_lists_every_top_level_verb() -> None:
    result = runner.invoke(_app(), ["--help"])
    assert result.exit_code == 0
    for verb in ("up", "demo", "catalog", "router", "operator"):
        assert verb in result.output


def test_version() -> None:
    result = runner.invoke(_app(), ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("mol 0.")


def test_components_arrive_through_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="mol.commands")}
    assert {"catalog", "router", "operator", "sandbox"} <= names


def test_router_serve_refuses_a_missing_config(tmp_path: Path) -> None:
    result = runner.invoke(_app(), ["router", "serve", "--config", str(tmp_path / "no.yaml")])
    assert result.exit_code == 2
    assert "cannot use" in result.output
    assert "no.yaml" in result.output


def test_installed_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mol_platform", "--help"], capture_output=True, text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "catalog" in out.stdout


def _complete(words: str) -> list[str]:
    """What the shell's completion function gets for the command line ``words``."""
    env = {"_MOL_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "mol_platform"], capture_output=True,
                         text=True, check=False, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_shell_completion_offers_verbs_and_choices() -> None:
    assert _complete("mol catalog p") == ["publish", "pull", "profile", "protected"]
    assert _complete("mol catalog ls -o ") == ["text", "json", "yaml"]
    # Typer finds the shell among the parent processes: run it from bash, as a user does
    # (the test runner's own ancestry has none when it was started detached).
    script = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m mol_platform "
                             "--show-completion"], capture_output=True, text=True, check=False)
    assert "_MOL_COMPLETE=complete_bash" in script.stdout, script.stderr
