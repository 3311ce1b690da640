"""The engine plugin's adapter-load counter, on fakes of vLLM's two LoRA managers.

The real engine is counted in tests/e2e/test_engine_adapter_loads.py; here: what
counts as a load, warm-up dummies not counting, totals summed over the engine's
processes, and the collector's exposition.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mol_platform.apps.vllm_plugin import loads
from mol_platform.apps.vllm_plugin.loads import Counts, LoadsCollector, totals, wrap


class FakeModelManager:
    """``activate_adapter``: True when the adapter was not in a GPU slot (vLLM's)."""

    def __init__(self) -> None:
        self.active: set[int] = set()

    def activate_adapter(self, lora_id: int) -> bool:
        if lora_id in self.active:
            return False
        self.active.add(lora_id)
        return True


class FakeWorkerManager:
    def __init__(self, model: FakeModelManager) -> None:
        self.model = model
        self.host: set[int] = set()

    def _load_adapter(self, lora_id: int) -> int:
        if lora_id < 0:
            raise FileNotFoundError("no such adapter")  # vLLM: LoRAAdapterNotFoundError
        return lora_id

    @contextlib.contextmanager
    def dummy_lora_cache(self) -> Iterator[None]:
        yield

    def add_adapter(self, lora_id: int) -> None:
        if lora_id not in self.host:
            self.host.add(self._load_adapter(lora_id))
        self.model.activate_adapter(lora_id)


def fresh_classes() -> tuple[type[FakeModelManager], type[FakeWorkerManager]]:
    """Subclasses of the fakes, so each test wraps classes of its own."""
    return (type("Model", (FakeModelManager,), {}),
            type("Worker", (FakeWorkerManager,), {}))  # fmt: skip


def written(folder: Path) -> dict[str, int]:
    return json.loads((folder / f"{os.getpid()}.json").read_text())  # type: ignore[no-any-return]


def test_slot_and_disk_loads_count_and_touches_do_not(tmp_path: Path) -> None:
    model_cls, worker_cls = fresh_classes()
    counts = Counts(tmp_path)
    assert wrap(model_cls, worker_cls, counts) is True
    worker = worker_cls(model_cls())
    worker.add_adapter(1)  # from disk into host memory, then into a slot
    worker.add_adapter(1)  # already in its slot: nothing
    assert written(tmp_path) == {"gpu": 1, "cpu": 1}
    worker.model.active.clear()  # evicted from its slot, still in host memory
    worker.add_adapter(1)
    assert written(tmp_path) == {"gpu": 2, "cpu": 1}
    with pytest.raises(FileNotFoundError):
        worker.add_adapter(-1)  # a load that fails counts nothing
    assert totals(tmp_path) == {"gpu": 2, "cpu": 1}


def test_warm_up_dummies_do_not_count(tmp_path: Path) -> None:
    model_cls, worker_cls = fresh_classes()
    wrap(model_cls, worker_cls, Counts(tmp_path))
    worker = worker_cls(model_cls())
    with worker.dummy_lora_cache():  # vLLM's profiling and warm-up runs
        worker.add_adapter(1)
        worker.add_adapter(2)
    assert totals(tmp_path) == {"gpu": 0, "cpu": 0}
    worker.add_adapter(3)
    assert totals(tmp_path) == {"gpu": 1, "cpu": 1}


def test_wrapping_twice_counts_once(tmp_path: Path) -> None:
    model_cls, worker_cls = fresh_classes()
    assert wrap(model_cls, worker_cls, Counts(tmp_path)) is True
    assert wrap(model_cls, worker_cls, Counts(tmp_path)) is False  # plugins load twice
    worker_cls(model_cls()).add_adapter(1)
    assert totals(tmp_path) == {"gpu": 1, "cpu": 1}


def test_totals_sum_the_engines_processes_and_skip_what_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "101.json").write_text('{"gpu": 3, "cpu": 1}')
    (tmp_path / "102.json").write_text('{"gpu": 2, "cpu": 2}')
    (tmp_path / "103.json").write_text('{"gpu": 2')  # half-written by a crashed writer
    (tmp_path / "104.json").write_text('{"gpu": -5, "cpu": "7"}')  # nonsense counts nothing
    (tmp_path / "105.tmp").write_text('{"gpu": 100, "cpu": 100}')  # not yet replaced
    assert totals(tmp_path) == {"gpu": 5, "cpu": 3}
    assert totals(tmp_path / "gone") == {"gpu": 0, "cpu": 0}


def test_the_collector_exposes_the_totals_as_a_counter(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    registry.register(LoadsCollector(tmp_path))
    text = generate_latest(registry).decode()
    assert "# TYPE mol_engine_adapter_loads_total counter" in text
    assert 'mol_engine_adapter_loads_total{tier="gpu"} 0.0' in text
    (tmp_path / "7.json").write_text('{"gpu": 4, "cpu": 1}')
    text = generate_latest(registry).decode()
    assert 'mol_engine_adapter_loads_total{tier="gpu"} 4.0' in text
    assert 'mol_engine_adapter_loads_total{tier="cpu"} 1.0' in text


def test_the_first_process_makes_the_folder_and_hands_it_down(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.delenv(loads.FOLDER_ENV, raising=False)
    folder = loads.shared_folder()
    try:
        assert folder.is_dir()
        assert os.environ[loads.FOLDER_ENV] == str(folder)  # what the engine core inherits
        assert loads.shared_folder() == folder  # a child process finds the same one
    finally:
        folder.rmdir()
    monkeypatch.setenv(loads.FOLDER_ENV, str(tmp_path))
    assert loads.shared_folder() == tmp_path


def test_a_missing_folder_loses_the_count_but_not_the_load(tmp_path: Path) -> None:
    model_cls, worker_cls = fresh_classes()
    wrap(model_cls, worker_cls, Counts(tmp_path / "gone"))
    worker: Any = worker_cls(model_cls())
    worker.add_adapter(1)  # the server is shutting down: the load still happens
    assert worker.model.active == {1}
