"""Adapter load time into vLLM by tier: from disk, from the host cache, resident.

Each figure is the wall time from asking to the first token of a one-token completion
sent straight to the engine, with the adapter starting in that tier:

- ``disk``: vLLM has never seen the name; ``POST /v1/load_lora_adapter`` reads the
  folder (safetensors, freshly written, so from the page cache), builds the LoRA
  tensors, keeps them in the host cache and puts them in a GPU slot; then the first
  token. Both parts are kept (``load_api_s``, ``first_token_s``).
- ``host``: the adapter is in the host cache (``--max-cpu-loras``) but not in a GPU
  slot: every slot was just taken by other adapters (one-token requests for
  ``max_loras`` others, all finished), so its request copies it back into a slot.
- ``resident``: the same request again, the adapter still in its slot.

Around each step the plugin's load counters (``mol_engine_adapter_loads_total``: ``cpu``
read from disk into host memory, ``gpu`` put into a GPU slot) are read from the
engine's /metrics, so the figures carry proof of the tier they claim: ``disk`` one of
each, ``host`` a GPU load and no disk read, ``resident`` neither (summed in ``loads``).

``base_first_token_s`` is the same request for the base model alone: a tier's load
cost is its figure minus ``resident`` (or minus the base, for the LoRA path's own cost).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from _http_leg import replica_counters
from gpu import traffic
from time_to_serve import first_token

TIERS = ("disk", "host", "resident")


class TierError(RuntimeError):
    """vLLM refused a load or an unload."""


def _post(client: httpx.Client, url: str, path: str, body: dict[str, object]) -> float:
    start = time.perf_counter()
    response = client.post(f"{url}{path}", json=body)
    took = time.perf_counter() - start
    if response.status_code != 200:
        raise TierError(f"{path} {body.get('lora_name')}: HTTP {response.status_code}: "
                        f"{response.text[:300]}")
    return took


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 5)


class Loads:
    """The engine's adapter-load counters since the last call."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.last = self._read()

    def _read(self) -> dict[str, int]:
        got = replica_counters([self.engine])
        return {"cpu": got["cpu"], "gpu": got["gpu"]}

    def since(self) -> dict[str, int]:
        now = self._read()
        delta = {k: now[k] - self.last[k] for k in now}
        self.last = now
        return delta


def _add(total: dict[str, int], delta: dict[str, int]) -> None:
    for k, v in delta.items():
        total[k] = total.get(k, 0) + v


def measure_rank(client: httpx.Client, engine: str, rank: int, folder: Path,
                 fillers: Sequence[str], prompt: str, repeats: int) -> dict[str, object]:
    """``repeats`` samples of every tier for one adapter folder; medians and samples."""
    load_api: list[float] = []
    after_load: list[float] = []
    host: list[float] = []
    resident: list[float] = []
    loads: dict[str, dict[str, int]] = {t: {} for t in TIERS}
    for i in range(repeats):
        name = f"tier-r{rank}-{i}"
        evicted = traffic.touch(engine, fillers, prompt)  # the slots hold the fillers
        if evicted.errors:
            raise TierError(f"filling the GPU slots failed: {evicted.first_error}")
        counter = Loads(engine)
        load_api.append(_post(client, engine, "/v1/load_lora_adapter",
                              {"lora_name": name, "lora_path": str(folder)}))
        after_load.append(first_token(client, engine, name))
        _add(loads["disk"], counter.since())
        evicted = traffic.touch(engine, fillers, prompt)
        if evicted.errors:
            raise TierError(f"filling the GPU slots failed: {evicted.first_error}")
        counter.since()
        host.append(first_token(client, engine, name))
        _add(loads["host"], counter.since())
        resident.append(first_token(client, engine, name))
        _add(loads["resident"], counter.since())
        _post(client, engine, "/v1/unload_lora_adapter", {"lora_name": name})
    disk = [a + b for a, b in zip(load_api, after_load, strict=True)]
    return {
        "rank": rank,
        "adapter_bytes": sum(p.stat().st_size for p in folder.iterdir()),
        "disk_s": _median(disk), "host_s": _median(host), "resident_s": _median(resident),
        "load_api_s": _median(load_api), "first_token_after_load_s": _median(after_load),
        "loads": loads,
        "samples": {"disk_s": [round(v, 5) for v in disk],
                    "host_s": [round(v, 5) for v in host],
                    "resident_s": [round(v, 5) for v in resident]},
    }


def measure(engine: str, served_model: str, by_rank: dict[int, Path], fillers: Sequence[str],
            prompt: str, repeats: int) -> dict[str, object]:
    """Every rank's tiers, and the base model's own first token (same request)."""
    with httpx.Client(timeout=120) as client:
        base = [first_token(client, engine, served_model) for _ in range(repeats)]
        ranks = [measure_rank(client, engine, r, folder, fillers, prompt, repeats)
                 for r, folder in sorted(by_rank.items())]
    return {"base_first_token_s": _median(base), "repeats": repeats, "by_rank": ranks}
