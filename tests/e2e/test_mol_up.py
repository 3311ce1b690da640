"""Acceptance: ``mol up`` as a user runs it, on the example deployment: the two curl
examples it prints answer through the router as the banner says (named, then decided by
the example utterances), and SIGTERM leaves no process behind."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from mol_testkit.net import free_port, port_open
from mol_testkit.up import MolUp

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron-local.yaml"


def test_mol_up_serves_its_curl_examples_and_stops_cleanly(
        tmp_path: Path, engine_venv: Path) -> None:
    ports = [free_port() for _ in range(3)]
    run = MolUp(["-f", str(EXAMPLE), "--data-dir", "data", "--catalog-port", str(ports[0]),
                 "--router-port", str(ports[1]), "--engine-port", str(ports[2])],
                cwd=tmp_path, env={"MOL_ENGINE_VENV": str(engine_venv)})
    try:
        banner = run.wait_ready(600)
        curls = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")
                 and "/v1/chat/completions" in line]
        assert len(curls) == 2, banner
        # the automatic one leads (what to try first), the one naming coding follows
        assert '"model": "auto"' in curls[0]
        assert '"router"' not in curls[0]
        assert '"router": "coding"' in curls[1]
        for command in curls:
            assert command.startswith("curl -si ")  # the headers are the point: printed
            done = subprocess.run(shlex.split(command), capture_output=True,
                                  text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            head, _, body = done.stdout.partition("\n\n")  # text mode: \r\n read as \n
            assert head.startswith("HTTP/1.1 200"), done.stdout
            assert json.loads(body)["choices"][0]["message"]["content"]
            if '"router": "coding"' in command:
                assert "x-mol-expert: coding" in head
                assert "x-mol-route: router" in head
            else:  # what the banner says the example shows: the example utterances decide
                assert "x-mol-route: semantic; score=" in head, head
        assert "# the router picks (semantic-then-classifier mode: keywords first" in banner
        assert "x-mol-route: what decided" in banner
        left = run.stop(signal.SIGTERM)
    except BaseException:
        run.kill()
        raise
    assert run.proc.returncode == 0, run.stderr
    assert len(run.started) >= 3  # catalog, engine (and its workers), router
    assert left == []
    assert not any(port_open(p) for p in ports)
