"""``/metrics`` of a simulated replica, named and labelled as vLLM v1 exposes them.

Names, label names and bucket bounds follow ``vllm/v1/metrics/loggers.py`` (vLLM 0.32):
per-engine series carry ``model_name`` (the served base model name) and ``engine``
("0"); ``vllm:lora_requests_info`` carries ``max_lora``, ``waiting_lora_adapters`` and
``running_lora_adapters`` only, and its value is the time of the update: label sets
from earlier states stay, the newest value is the current state. Both adapter labels
list the same names, every adapter with a waiting or running request, as vLLM does.
Each replica has its own registry so that many can live in one process.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mol_platform.testing.simulator.model import SlotEngine

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SimMetrics:
    """The Prometheus series of one replica, kept in step with its engine."""

    def __init__(self, engine: SlotEngine) -> None:
        self.engine = engine
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = (engine.config.model, "0")
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=reg)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        ).labels(*values)
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        ).labels(*values)
        by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason.",
            [*labels, "reason"],
            registry=reg,
        )
        self.waiting_capacity = by_reason.labels(*values, "capacity")
        self.waiting_deferred = by_reason.labels(*values, "deferred")
        self.kv_cache_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        ).labels(*values)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg
        ).labels(*values)
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            labels,
            registry=reg,
        ).labels(*values)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            registry=reg,
            buckets=TTFT_BUCKETS,
        ).labels(*values)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            registry=reg,
            buckets=ITL_BUCKETS,
        ).labels(*values)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        ).labels(*values)
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            labels,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        ).labels(*values)
        self.lora_info = Gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            registry=reg,
        )
        self._last_lora_stamp = 0.0
        engine.listeners.append(self.update)
        self.update()

    def update(self) -> None:
        """Record the engine's scheduler state, as vLLM does after every step."""
        engine = self.engine
        deferred = engine.waiting_deferred()
        self.running.set(len(engine.running))
        self.waiting.set(len(engine.waiting))
        self.waiting_capacity.set(len(engine.waiting) - deferred)
        self.waiting_deferred.set(deferred)
        self.kv_cache_usage.set(len(engine.running) / engine.config.max_num_seqs)
        if not engine.requests_by_model:
            return  # vLLM writes no lora_requests_info before the first request
        names = ",".join(engine.lora_requests)
        # Strictly increasing, so the newest label set is unambiguous.
        stamp = max(time.time(), self._last_lora_stamp + 1e-6)
        self._last_lora_stamp = stamp
        self.lora_info.labels(
            max_lora=str(engine.config.max_loras),
            waiting_lora_adapters=names,
            running_lora_adapters=names,
        ).set(stamp)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
