"""``/metrics`` of a simulated replica, named and labelled as vLLM v1 exposes them.

Names, types, label names, bucket bounds and help texts follow vLLM 0.32's
Prometheus logger (``vllm/v1/metrics/loggers.py``, ``buckets.py``): per-engine series
carry ``model_name`` (the served base model name) and ``engine`` ("0").
``vllm:lora_requests_info`` carries ``max_lora``, ``waiting_lora_adapters`` and
``running_lora_adapters``; its value is the time of the update, so label sets from
earlier states stay and the newest value is the current state. As in vLLM both
adapter labels list the same names: the adapters with a request that is producing
tokens (a request waiting for a LoRA slot does not count until it runs), empty when
none. ``mol_sim_*`` series exist only on the simulator. Each replica has its own
registry so that many can live in one process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mol_testkit.simulator.model import SlotEngine

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
ITERATION_TOKENS_BUCKETS = tuple(float(2**i) for i in (0, *range(3, 15)))
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTIONS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
# vLLM's text format since prometheus_client 0.22, what its /metrics answers with.
CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_model_len`` (vLLM's request-token buckets)."""
    out: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(out)
            out.append(float(mantissa * scale))
        scale *= 10


class SimMetrics:
    """The Prometheus series of one replica, kept in step with its engine."""

    def __init__(self, engine: SlotEngine) -> None:
        self.engine = engine
        cfg = engine.config
        self.registry = sched = CollectorRegistry()
        """The scheduler families a router or autoscaler reads: always exposed."""
        self.detail_registry = reg = CollectorRegistry()
        """Every other family: exposed unless ``SimConfig.detailed_metrics`` is off."""
        labels = ["model_name", "engine"]
        self._values = values = (cfg.model, "0")

        def gauge(
            name: str, doc: str, extra: Sequence[str] = (), registry: CollectorRegistry = sched
        ) -> Gauge:
            return Gauge(name, doc, [*labels, *extra], registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=reg).labels(*values)

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, labels, registry=reg, buckets=buckets).labels(*values)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        ).labels(*values)
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        ).labels(*values)
        by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.",
            ["reason"],
        )
        self.waiting_capacity = by_reason.labels(*values, "capacity")
        self.waiting_deferred = by_reason.labels(*values, "deferred")
        sleep = gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            ["sleep_state"],
            registry=reg,
        )
        for state in SLEEP_STATES:
            sleep.labels(*values, state).set(1 if state == "awake" else 0)
        self.kv_cache_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        ).labels(*values)
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
        )
        counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in "
            "terms of number of cached tokens.",
        )
        counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        )
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*labels, "source"],
            registry=reg,
        )
        for source in PROMPT_SOURCES:
            by_source.labels(*values, source)
        self.prompt_tokens_computed = by_source.labels(*values, "local_compute")
        self.prompt_tokens_local_hit = by_source.labels(*values, "local_cache_hit")
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        cached_by_source = Counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            [*labels, "source"],
            registry=reg,
        )
        for source in CACHE_SOURCES:
            cached_by_source.labels(*values, source)
        self.cached_on_device = cached_by_source.labels(*values, "device")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=reg,
        )
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rejections.labels(cfg.model, reason)
        tokens = token_buckets(cfg.max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS_BUCKETS,
        )
        self.max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS
        )
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            LATENCY_BUCKETS,
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            PREEMPTIONS_BUCKETS,
        )
        self.prefill_kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        self.lora_info = Gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            registry=sched,
        )
        cache_info = cache_config_labels(engine)
        Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(cache_info),
            registry=sched,
        ).labels(**cache_info).set(1)
        self.adapter_loads = Counter(
            "mol_engine_adapter_loads",
            "Adapters brought into GPU slots (tier=gpu) or read into host memory (tier=cpu) "
            "that were not resident there (the MoL engine plugin's counter).",
            [*labels, "tier"],
            registry=sched,
        )
        self._loads_seen = {"gpu": 0, "cpu": 0}
        self._cache_seen = {"queries": 0, "hits": 0, "preemptions": 0}
        for tier in self._loads_seen:
            self.adapter_loads.labels(*values, tier)
        self._last_lora_stamp = 0.0
        self._lora_names: str | None = None
        engine.listeners.append(self._changed)
        self.update()

    def _changed(self) -> None:
        """After each scheduler change: a new ``lora_requests_info`` label set, if any.

        The gauges are only read when scraped, so :meth:`update` sets them then; the
        adapter list is written on every change so that its label sets pile up as
        vLLM's do.
        """
        engine = self.engine
        if engine.requests_by_model and ",".join(engine.lora_requests) != self._lora_names:
            self._write_lora_info()

    def update(self) -> None:
        """Record the engine's scheduler state, as vLLM does after every step."""
        engine = self.engine
        deferred = engine.waiting_deferred()
        self.running.set(len(engine.running))
        self.waiting.set(len(engine.waiting))
        self.waiting_capacity.set(len(engine.waiting) - deferred)
        self.waiting_deferred.set(deferred)
        self.kv_cache_usage.set(engine.kv_cache_usage())
        for tier, total in engine.total_loads.items():
            if total > self._loads_seen[tier]:
                self.adapter_loads.labels(*self._values, tier).inc(total - self._loads_seen[tier])
                self._loads_seen[tier] = total
        self._sync_cache_counters()
        if engine.requests_by_model:  # vLLM writes none before the first request
            self._write_lora_info()

    def _sync_cache_counters(self) -> None:
        """Prefix-cache lookups (counted at admission, as vLLM's scheduler does) and
        preemptions, from the engine's running totals."""
        engine, seen = self.engine, self._cache_seen
        totals = {"queries": engine.prefix_queries, "hits": engine.prefix_hits,
                  "preemptions": engine.preemptions}  # fmt: skip
        targets = {"queries": (self.prefix_queries,), "preemptions": (self.preemptions,),
                   "hits": (self.prefix_hits, self.cached_on_device)}  # fmt: skip
        for key, total in totals.items():
            if total > seen[key]:
                for counter in targets[key]:
                    counter.inc(total - seen[key])
                seen[key] = total

    def _write_lora_info(self) -> None:
        engine = self.engine
        names = ",".join(engine.lora_requests)
        self._lora_names = names
        # Strictly increasing, so the newest label set is unambiguous.
        stamp = max(time.time(), self._last_lora_stamp + 1e-6)
        self._last_lora_stamp = stamp
        self.lora_info.labels(
            max_lora=str(engine.config.max_loras),
            waiting_lora_adapters=names,
            running_lora_adapters=names,
        ).set(stamp)

    def exposition(self) -> bytes:
        self.update()
        text = generate_latest(self.registry)
        if self.engine.config.detailed_metrics:
            text += generate_latest(self.detail_registry)
        return text


def cache_config_labels(engine: SlotEngine) -> dict[str, str]:
    """``vllm:cache_config_info`` labels: vLLM's CacheConfig fields, this replica's sizes."""
    cfg = engine.config
    block = str(cfg.block_size)
    return {
        "_block_size_resolved": "True", "block_size": block, "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None", "effective_attention_block_size": block,
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "engine": "0", "gpu_memory_utilization": "0.92", "hash_block_size": "None",
        "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(cfg.kv_cache_blocks * cfg.block_size / cfg.max_model_len),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(cfg.kv_cache_blocks * cfg.block_size),
        "kv_offloading_backend": "native", "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None", "num_gpu_blocks": str(cfg.kv_cache_blocks),
        "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None",
        "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
        "sliding_window": "None", "swa_bounded_replay": "True", "use_kda_recoverssm": "False",
        "use_replayssm": "False", "user_specified_block_size": "False",
    }  # fmt: skip
