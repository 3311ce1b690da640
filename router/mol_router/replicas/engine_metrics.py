"""Reads the few vLLM series replica picking needs out of an engine's ``/metrics``.

A line scan rather than a full Prometheus parser: an engine's exposition is mostly
histograms the router ignores, and ``vllm:lora_requests_info`` keeps one stale label
set per past state (its value is the time of the update; the newest is current), so
the text grows over an engine's life and parsing all of it every scrape would cost
the router CPU it needs for proxying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_LORA = "vllm:lora_requests_info"
_PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """One scrape: queue lengths summed over the engine's label sets (data-parallel
    engines publish one per engine core), KV usage the highest of them."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    max_lora: int = 0
    running_adapters: tuple[str, ...] = ()
    prefix_queries: float = 0.0
    """``vllm:prefix_cache_queries_total`` (tokens): a counter, so a drop means the
    engine restarted with an empty cache."""


def _labels(text: str) -> dict[str, str]:
    return {
        k: _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v)
        for k, v in _LABEL.findall(text)
    }


def _split_sample(line: str) -> tuple[str, str, float] | None:
    """``name{labels} value [timestamp]`` -> (name, label text, value)."""
    brace = line.find("{")
    if brace >= 0:
        end = line.rfind("}")
        if end < brace:
            return None
        name, labels, rest = line[:brace], line[brace + 1 : end], line[end + 1 :]
    else:
        name, _, rest = line.partition(" ")
        labels = ""
    parts = rest.split()
    if not parts:
        return None
    try:
        return name, labels, float(parts[0])
    except ValueError:
        return None


def parse_engine_metrics(text: str) -> EngineMetrics:
    """The replica-picking view of a vLLM exposition; absent series read as zero."""
    running = waiting = 0.0
    kv = 0.0
    lora_stamp = float("-inf")
    lora_labels = ""
    queries = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        sample = _split_sample(line)
        if sample is None:
            continue
        name, labels, value = sample
        if name == _RUNNING:
            running += value
        elif name == _WAITING:
            waiting += value
        elif name in _KV:
            kv = max(kv, value)
        elif name == _LORA and value > lora_stamp:
            lora_stamp, lora_labels = value, labels
        elif name == _PREFIX_QUERIES:
            queries += value
    max_lora = 0
    adapters: tuple[str, ...] = ()
    if lora_labels:
        info = _labels(lora_labels)
        try:
            max_lora = max(int(info.get("max_lora", "0") or 0), 0)
        except ValueError:
            max_lora = 0
        names = info.get("running_lora_adapters", "")
        adapters = tuple(dict.fromkeys(n.strip() for n in names.split(",") if n.strip()))
    return EngineMetrics(
        running=max(int(running), 0),
        waiting=max(int(waiting), 0),
        kv_cache_usage=kv,
        max_lora=max_lora,
        running_adapters=adapters,
        prefix_queries=queries,
    )
