"""Adapter loads counted where vLLM makes them: ``mol_engine_adapter_loads_total``.

vLLM 0.32 exports no load counter or event, and its API server (which serves
``/metrics``) never touches an adapter's weights: the worker in the engine-core
process does. vLLM loads general plugins in that process too, so there the plugin
wraps the two places a load happens: ``LoRAModelManager.activate_adapter`` moves an
adapter into a GPU slot (True when it was not in one: ``tier="gpu"``) and
``WorkerLoRAManager._load_adapter`` reads one from disk into host memory
(``tier="cpu"``, as the simulator counts them: docs/simulator.md). vLLM's warm-up
runs activate dummy adapters inside ``dummy_lora_cache()``; those are not counted.

Each counting process writes its totals to a file of its own (replaced atomically,
so a reader sees the old or the new totals, never half) in a folder that the first
process to load the plugin creates and hands down in ``MOL_ENGINE_LOADS_DIR``: the API
server, which starts the engine core and so passes its environment on. A collector in
every process's default Prometheus registry sums the folder's files at each scrape;
the API server's is the one ``/metrics`` serves. (With ``--api-server-count`` above 1
vLLM serves a multiprocess registry instead, which this collector is not part of.)
Nothing here imports vLLM: the classes to wrap are handed in, so it is tested on fakes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

FOLDER_ENV = "MOL_ENGINE_LOADS_DIR"
METRIC = "mol_engine_adapter_loads"
TIERS = ("gpu", "cpu")
_WRAPPED = "__mol_counts_loads__"


class Counts:
    """This process's loads by tier, written to ``folder/<pid>.json`` on each one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.totals = dict.fromkeys(TIERS, 0)
        self._lock = threading.Lock()
        self._warming = 0

    @contextlib.contextmanager
    def warming(self) -> Iterator[None]:
        """Loads inside this block are vLLM's warm-up dummies: not counted."""
        with self._lock:
            self._warming += 1
        try:
            yield
        finally:
            with self._lock:
                self._warming -= 1

    def add(self, tier: str) -> None:
        with self._lock:
            if self._warming:
                return
            self.totals[tier] += 1
            text = json.dumps(self.totals)
        path = self.folder / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError:  # the folder went away (the server is shutting down)
            pass


def totals(folder: Path) -> dict[str, int]:
    """The loads of every process that counted, by tier (files that cannot be read
    or parsed count nothing: a process that crashed mid-write left only a ``.tmp``)."""
    out = dict.fromkeys(TIERS, 0)
    with contextlib.suppress(OSError):
        for path in folder.glob("*.json"):
            try:
                counts = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(counts, dict):
                for tier in TIERS:
                    value = counts.get(tier)
                    if isinstance(value, int) and value >= 0:
                        out[tier] += value
    return out


class LoadsCollector(Collector):
    """``mol_engine_adapter_loads_total{tier}``: the folder's totals at scrape time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            METRIC, "Adapter loads of this engine: tier=gpu into a LoRA slot (a copy from "
            "host memory), tier=cpu read from disk into host memory first.",
            labels=["tier"])  # fmt: skip
        for tier, value in totals(self.folder).items():
            family.add_metric([tier], value)
        yield family


def shared_folder() -> Path:
    """The folder the engine's processes count in: the one handed down, or a new one
    (this is the first process: it also removes the folder when it exits)."""
    given = os.environ.get(FOLDER_ENV)
    if given:
        return Path(given)
    folder = Path(tempfile.mkdtemp(prefix="mol-engine-loads-"))
    os.environ[FOLDER_ENV] = str(folder)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def wrap(model_manager: Any, worker_manager: Any, counts: Counts) -> bool:
    """Count loads in vLLM's LoRA managers (``LoRAModelManager``,
    ``WorkerLoRAManager``); False when they were wrapped already (vLLM loads general
    plugins more than once in some processes)."""
    if getattr(model_manager.activate_adapter, _WRAPPED, False):
        return False
    activate = model_manager.activate_adapter
    load = worker_manager._load_adapter
    dummies = worker_manager.dummy_lora_cache

    @functools.wraps(activate)
    def activate_adapter(self: Any, *args: Any, **kwargs: Any) -> Any:
        moved = activate(self, *args, **kwargs)
        if moved is True:
            counts.add("gpu")
        return moved

    @functools.wraps(load)
    def _load_adapter(self: Any, *args: Any, **kwargs: Any) -> Any:
        lora = load(self, *args, **kwargs)
        counts.add("cpu")  # only once it loaded: a missing path raises and counts nothing
        return lora

    @functools.wraps(dummies)
    @contextlib.contextmanager
    def dummy_lora_cache(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with counts.warming(), dummies(self, *args, **kwargs) as value:
            yield value

    for fn in (activate_adapter, _load_adapter, dummy_lora_cache):
        setattr(fn, _WRAPPED, True)
    model_manager.activate_adapter = activate_adapter
    worker_manager._load_adapter = _load_adapter
    worker_manager.dummy_lora_cache = dummy_lora_cache
    return True


_installed: list[LoadsCollector] = []


def install(model_manager: Any, worker_manager: Any) -> None:
    """Count this process's loads and export the engine's (once per process)."""
    if _installed:
        return
    folder = shared_folder()
    wrap(model_manager, worker_manager, Counts(folder))
    collector = LoadsCollector(folder)
    REGISTRY.register(collector)
    _installed.append(collector)
