"""Every benchmark answers ``--help`` with its options (argparse fails on a stray ``%``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py")
                 if not p.name.startswith("_") and "argparse" in p.read_text())  # fmt: skip


def test_there_are_benchmarks_to_ask() -> None:
    assert len(SCRIPTS) >= 5, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_lists_the_options(script: Path) -> None:
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                         text=True, timeout=120, cwd=BENCH.parent)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout
    assert "--" in out.stdout.split("usage:", 1)[1]
