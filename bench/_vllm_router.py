"""The vLLM project's Rust router (PyPI `vllm-router`) as a comparison.

It lives in a cached venv outside the checkout, built on first use from the
`bench-router` extra of pyproject.toml (one wheel, a few seconds), like MLflow's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from _machine import Proc, pinned, wait_http

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MOL_BENCH_CACHE", Path.home() / ".cache/mol-platform/bench"))


def pin() -> str:
    """`vllm-router==X.Y.Z` from the `bench-router` extra."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for spec in data["project"]["optional-dependencies"]["bench-router"]:
        if spec.startswith("vllm-router=="):
            return str(spec)
    raise RuntimeError("pyproject.toml's bench-router extra must pin vllm-router==X.Y.Z")


def ensure_binary() -> Path:
    """The cached `vllm-router` executable, installed (once) when missing."""
    spec = pin()
    venv = CACHE / f"vllm-router-{spec.split('==', 1)[1]}"
    binary = venv / "bin" / "vllm-router"
    if binary.exists():
        return binary
    print(f"{spec}: building its venv in {venv} (once)", file=sys.stderr, flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", spec], check=True)
    return binary


def command(workers: list[str], policy: str, port: int, metrics_port: int) -> list[str]:
    """The command line of a vllm-router in front of ``workers`` on ``port``."""
    return [
        str(ensure_binary()), "--host", "127.0.0.1", "--port", str(port),
        "--policy", policy, "--prometheus-port", str(metrics_port),
        "--log-level", "warning", "--worker-urls", *workers,
    ]  # fmt: skip


def start(
    workers: list[str], policy: str, port: int, metrics_port: int, log: Path,
    cores: str | None = None,
) -> Proc:  # fmt: skip
    """A running vllm-router in front of ``workers`` (it needs only their /health)."""
    argv = command(workers, policy, port, metrics_port)
    proc = Proc(f"vllm-router {policy}", pinned(argv, cores), log=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=60)
    except BaseException:
        proc.stop()
        raise
    return proc
