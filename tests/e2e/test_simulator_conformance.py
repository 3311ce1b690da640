"""Differential conformance: the simulator answers like the real vLLM 0.32 CPU engine.

One real engine (the session ``engine`` fixture: demo base, ``chat`` and ``coding``
preloaded, ``--max-loras 2 --max-cpu-loras 4``, no tool-call parser) and one simulator
with the same configuration get the same requests. Status codes, JSON shapes (keys and
value types, not generated text), error type/param/message, token counts, metric
families with their labels and buckets, and the scheduler semantics of
``lora_requests_info``, ``num_requests_running/waiting`` and ``kv_cache_usage_perc``
must match, and so must what the prefix cache's counters say about the same request
sequence. ``DELIBERATE`` names what differs on purpose and why.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mol_platform.contract.engine_args import cpu_env
from mol_testkit.simulator import SimConfig, SimulatorCluster, parse_sse
from mol_testkit.simulator.segments import prompt_text

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _kvcapacity import GIB, KvShape, kv_blocks

pytestmark = pytest.mark.e2e

MAX_LORAS, MAX_CPU_LORAS = 2, 4
MAX_MODEL_LEN = 1024  # the engine fixture's --max-model-len
EXTRA_ADAPTERS = {"diff-agent": "agent", "diff-ui": "ui"}  # name -> demo adapter
# Of each concurrent request: long enough (~1 s on the real engine) for every
# scheduler state to last several scrapes, also on a quiet fast machine.
PROMPT_TOKENS, OUTPUT = 121, 200

DELIBERATE = {
    # metric families: model FLOP/byte estimates need a model; the simulator has none.
    "vllm:estimated_flops_per_gpu": "no model to estimate FLOPs of",
    "vllm:estimated_read_bytes_per_gpu": "no model to estimate memory traffic of",
    "vllm:estimated_write_bytes_per_gpu": "no model to estimate memory traffic of",
}
# case -> (fields of the answer not compared, why)
DELIBERATE_FIELDS = {
    "structured none": (("message",), "the message embeds vLLM's internal params repr"),
    "stop string": (("usage",), "tokens before the stop string depend on the generated text"),
    "load": (("type",), "vLLM sends no Content-Type; aiohttp always sends one (text/plain)"),
    "unload": (("type",), "vLLM sends no Content-Type; aiohttp always sends one (text/plain)"),
}

TOOLS = [{"type": "function", "function": {"name": "handoff", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "user", "content": "hello world"}]
LONG = "hi " * 1100


def comp(**fields: Any) -> dict[str, Any]:
    return {"model": "chat", "prompt": "hello world", "max_tokens": 4, "ignore_eos": True,
            **fields}  # fmt: skip


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": MESSAGES, "max_tokens": 4, "ignore_eos": True,
            **fields}  # fmt: skip


C, CC = "/v1/completions", "/v1/chat/completions"
LOAD, UNLOAD = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
USAGE = {"stream": True, "stream_options": {"include_usage": True}}

# (case, method, path, JSON body or raw bytes); {agent} becomes the agent adapter's path.
CASES: list[tuple[str, str, str, Any]] = [
    ("models", "GET", "/v1/models", None),
    ("health", "GET", "/health", None),
    ("ping", "GET", "/ping", None),
    ("ping post", "POST", "/ping", None),
    ("version", "GET", "/version", None),
    ("load", "GET", "/load", None),
    ("unknown path", "GET", "/v1/nope", None),
    ("wrong method", "GET", C, None),
    ("completion", "POST", C, comp()),
    ("chat", "POST", CC, chat()),
    ("base model", "POST", C, comp(model="demo-base")),
    ("completion stream", "POST", C, comp(**USAGE)),
    ("chat stream", "POST", CC, chat(**USAGE)),
    ("chat stream no usage", "POST", CC, chat(stream=True)),
    ("stop string", "POST", C, comp(max_tokens=30, stop=["e"], temperature=0, ignore_eos=False)),
    ("choice", "POST", CC, chat(structured_outputs={"choice": ["a", "b"]}, ignore_eos=False)),
    ("tool choice none", "POST", CC, chat(tools=TOOLS, tool_choice="none")),
    ("max_tokens > max_model_len", "POST", C, comp(max_tokens=5000)),
    ("chat max_tokens > max_model_len", "POST", CC, chat(max_tokens=5000)),
    ("max_tokens 0", "POST", C, comp(max_tokens=0)),
    ("max_tokens not int", "POST", C, comp(max_tokens="x")),
    ("prompt too long", "POST", C, comp(prompt="hello " * 1100)),
    ("chat prompt too long", "POST", CC, chat(messages=[{"role": "user", "content": LONG}])),
    ("temperature < 0", "POST", CC, chat(temperature=-1)),
    ("temperature > 2", "POST", C, comp(temperature=3)),
    ("temperature not number", "POST", C, comp(temperature="hot")),
    ("n 2 greedy", "POST", C, comp(n=2, temperature=0)),
    ("structured empty choice", "POST", CC, chat(structured_outputs={"choice": []})),
    ("structured none", "POST", CC, chat(structured_outputs={"foo": 1})),
    ("structured two", "POST", CC, chat(structured_outputs={"choice": ["a"], "regex": "a+"})),
    ("tools without parser", "POST", CC, chat(tools=TOOLS)),
    ("named tool without parser", "POST", CC,
     chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "handoff"}})),
    ("required tool without parser", "POST", CC, chat(tools=TOOLS, tool_choice="required")),
    ("empty messages", "POST", CC, chat(messages=[])),
    ("messages not list", "POST", CC, chat(messages="x")),
    ("no prompt", "POST", C, {"model": "chat"}),
    ("unknown model", "POST", C, comp(model="nope")),
    ("bad json", "POST", C, b"{"),
    ("array body", "POST", C, [1]),
    ("load bad path", "POST", LOAD, {"lora_name": "diff-bad", "lora_path": "/nonexistent/x"}),
    ("after bad path", "POST", C, comp(model="diff-bad")),
    ("load base name", "POST", LOAD, {"lora_name": "demo-base", "lora_path": "{agent}"}),
    ("load no path", "POST", LOAD, {"lora_name": "diff-x"}),
    ("load", "POST", LOAD, {"lora_name": "diff-once", "lora_path": "{agent}"}),
    ("load again", "POST", LOAD, {"lora_name": "diff-once", "lora_path": "{agent}"}),
    ("loaded answers", "POST", CC, chat(model="diff-once")),
    ("unload", "POST", UNLOAD, {"lora_name": "diff-once"}),
    ("unloaded is gone", "POST", C, comp(model="diff-once")),
    ("unload unknown", "POST", UNLOAD, {"lora_name": "diff-once"}),
    ("unload no name", "POST", UNLOAD, {}),
]  # fmt: skip


@pytest.fixture(scope="module")
def cache_info(engine) -> dict[str, str]:
    """The real engine's ``vllm:cache_config_info`` labels (block size, block count)."""
    text = httpx.get(engine.base_url + "/metrics", timeout=30).text
    return family_samples(text, "vllm:cache_config_info")[0][0]


@pytest.fixture(scope="module")
def sim_config(engine, demo_assets, cache_info) -> SimConfig:
    """The simulator configured like the engine fixture (adapter paths checked, the
    default, as vLLM does)."""
    return SimConfig(
        model=engine.model, model_path=str(demo_assets.base), max_model_len=MAX_MODEL_LEN,
        lora_modules={n: str(demo_assets.adapters[n]) for n in ("chat", "coding")},
        max_loras=MAX_LORAS, max_cpu_loras=MAX_CPU_LORAS,
        block_size=int(cache_info["block_size"]),
        kv_cache_blocks=int(cache_info["num_gpu_blocks"]),
        tool_call_parser=None, itl_s=0.002,
    )  # fmt: skip


@pytest.fixture(scope="module")
def sim(sim_config) -> Iterator[str]:
    """A simulator replica configured like the engine fixture; yields its URL."""
    with SimulatorCluster(config=sim_config) as cluster:
        yield cluster.urls[0]


def family_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return [(dict(s.labels), s.value) for s in family.samples]
    return []


def shape(value: Any) -> Any:
    """Keys and JSON types, recursively; no values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


def send(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    if isinstance(body, bytes):
        return client.request(method, path, content=body,
                              headers={"Content-Type": "application/json"})  # fmt: skip
    return client.request(method, path, json=body)


def answer(response: httpx.Response) -> dict[str, Any]:
    """What must match: status, content type, body shape, error fields, usage, finish."""
    out: dict[str, Any] = {"status": response.status_code}
    kind = response.headers.get("content-type", "").split(";")[0]
    out["type"] = kind
    if kind == "text/event-stream":
        events = parse_sse(response.text)
        out["done"] = events[-1] == "[DONE]"
        chunks = [e for e in events if isinstance(e, dict)]
        out["first"], out["last"] = shape(chunks[0]), shape(chunks[-1])
        out["middle"] = [shape(c) for c in chunks[1:-2]][:1]
        out["usage"] = chunks[-1].get("usage")
        return out
    if kind != "application/json":
        out["text"] = response.text
        return out
    body = response.json()
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        out["error"] = {k: error[k] for k in ("type", "param", "code")}
        out["message"] = error["message"]
        return out
    out["shape"] = shape(body)
    if isinstance(body, dict) and "usage" in body:
        out["usage"] = body["usage"]
        choice = body["choices"][0]
        out["finish"] = (choice["finish_reason"], choice.get("stop_reason"))
    if isinstance(body, dict) and body.get("object") == "list":
        out["ids"] = [m["id"] for m in body["data"]]
    return out


def test_same_requests_get_the_same_answers(engine, sim, demo_assets):
    agent = str(demo_assets.adapters["agent"])
    diffs = []
    with (
        httpx.Client(base_url=engine.base_url, timeout=60) as real,
        httpx.Client(base_url=sim, timeout=60) as fake,
    ):
        for case, method, path, body in CASES:
            if isinstance(body, dict):
                body = json.loads(json.dumps(body).replace("{agent}", agent))
            want = answer(send(real, method, path, body))
            got = answer(send(fake, method, path, body))
            for field in DELIBERATE_FIELDS.get(case, ((), ""))[0]:
                want.pop(field, None), got.pop(field, None)
            if case == "models":  # other tests may have loaded adapters on the engine
                want["ids"] = [i for i in want["ids"] if i in got["ids"]]
            if want != got:
                diffs.append(f"{case}:\n  real: {want}\n  sim:  {got}")
    assert not diffs, "\n".join(diffs)


def scrape(client: httpx.Client) -> dict[str, Any]:
    text = client.get("/metrics").text
    values = {
        (name, labels.get("reason", "")): value
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:num_requests_waiting_by_reason", "vllm:kv_cache_usage_perc")
        for labels, value in family_samples(text, name)
    }  # fmt: skip
    lora = family_samples(text, "vllm:lora_requests_info")
    newest = max(lora, key=lambda s: s[1])[0] if lora else {}
    return {
        "running": values[("vllm:num_requests_running", "")],
        "waiting": values[("vllm:num_requests_waiting", "")],
        "deferred": values[("vllm:num_requests_waiting_by_reason", "deferred")],
        "capacity": values[("vllm:num_requests_waiting_by_reason", "capacity")],
        "usage": values[("vllm:kv_cache_usage_perc", "")],
        "lora": newest,
    }


def run_over_adapters(url: str, adapters: dict[str, str]) -> list[dict[str, Any]]:
    """Load two more adapters, send one request per adapter (4 over 2 slots) at once,
    scrape /metrics all along, unload; the scrapes.

    Threads report what went wrong to the main thread (an exception in a thread is
    otherwise only printed), and a scrape that times out on a busy machine is retried:
    a run whose scrapes missed its requests fails with that cause, not with facts unseen.
    """
    prompt = "hello world " * 24  # 121 tokens: one 128-token block, a second after 8 more
    observed: list[dict[str, Any]] = []
    errors: list[str] = []
    retried: list[str] = []  # scrapes that failed over HTTP and were taken again
    stop = threading.Event()
    done = threading.Event()  # every request answered
    during = 0  # scrapes taken while requests were still in flight

    def scraper() -> None:
        nonlocal during
        with httpx.Client(base_url=url, timeout=30) as metrics:
            while not stop.is_set():
                try:
                    began = time.monotonic()
                    seen = scrape(metrics)
                    observed.append({**seen, "began": began, "ended": time.monotonic()})
                    during += not done.is_set()
                except httpx.HTTPError as e:  # a slow scrape: try again
                    retried.append(repr(e))
                except Exception as e:  # e.g. a family missing: reported below
                    errors.append(f"scrape: {e!r}")
                    return
                time.sleep(0.02)

    together = threading.Barrier(2 + len(adapters))
    answered: dict[str, int] = {}
    answered_at: dict[str, float] = {}

    def one(model: str) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": OUTPUT, "ignore_eos": True}
        try:
            with httpx.Client(timeout=120) as c:
                together.wait()  # all four arrive at once: two must wait for a LoRA slot
                r = c.post(url + C, json=body)
            answered[model] = r.status_code
            answered_at[model] = time.monotonic()
            if r.status_code != 200:
                errors.append(f"{model}: {r.status_code} {r.text[:300]}")
        except Exception as e:  # reported by the main thread
            errors.append(f"{model}: {e!r}")

    with httpx.Client(base_url=url, timeout=60) as client:
        for name, path in adapters.items():
            r = client.post(LOAD, json={"lora_name": name, "lora_path": path})
            assert r.status_code == 200, r.text
        try:
            watcher = threading.Thread(target=scraper)
            watcher.start()
            models = ("chat", "coding", *adapters)
            workers = [threading.Thread(target=one, args=(m,)) for m in models]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            done.set()
            time.sleep(0.3)
            stop.set()
            watcher.join()
            observed.append({**scrape(client), "began": time.monotonic(), "ended": None})
        finally:
            for name in adapters:
                client.post(UNLOAD, json={"lora_name": name})
    assert not errors, (errors, retried)
    assert answered == dict.fromkeys(models, 200), (answered, errors)
    assert during >= 5, f"only {during} scrapes while requests ran; retried: {retried}"
    # The two requests answered last ran after the first two (two LoRA slots): a scrape
    # taken wholly between the second answer and the third saw them running.
    order = sorted(answered_at.values())
    for s in observed:
        s["second_pair_running"] = s["ended"] is not None and \
            order[1] <= s["began"] and s["ended"] <= order[2]
    return observed


def scheduler_facts(observed: list[dict[str, Any]], blocks: int, block_size: int) -> set[str]:
    """What the scrapes show, as statements both engines must make true."""
    facts = set()
    listed: set[str] = set()
    for s in observed:
        names = [n for n in s["lora"].get("running_lora_adapters", "").split(",") if n]
        assert s["lora"].get("waiting_lora_adapters") == s["lora"].get("running_lora_adapters")
        assert len(names) <= MAX_LORAS, s
        listed.update(names)
        assert s["waiting"] == s["deferred"] + s["capacity"], s
        used = s["usage"] * (blocks - 1)
        assert abs(used - round(used)) < 1e-6, s  # whole blocks of the usable ones
        per_request = -(-(PROMPT_TOKENS + OUTPUT) // block_size)
        assert round(used) <= s["running"] * per_request, s
        if s["running"] == 2 and s["deferred"] == 2:
            facts.add("two run while two wait for a LoRA slot")
        if s["running"] and s["usage"] > 0:
            facts.add("running requests hold KV blocks")
        if round(used) > s["running"] > 0:
            facts.add("KV blocks grow with generated tokens")
    if len(listed) == 4:
        facts.add("every adapter was listed once it ran")
    if any(s["second_pair_running"] for s in observed):
        facts.add("a scrape landed while the second pair ran")
    last = observed[-1]
    if last["running"] == last["waiting"] == last["usage"] == 0:
        facts.add("idle: nothing running, nothing waiting, no KV blocks in use")
    if last["lora"].get("running_lora_adapters") == "":
        facts.add("idle: no adapter listed")
    return facts


def test_scheduler_metrics_mean_the_same(engine, sim_config, demo_assets, cache_info):
    adapters = {name: str(demo_assets.adapters[src]) for name, src in EXTRA_ADAPTERS.items()}
    blocks, block_size = int(cache_info["num_gpu_blocks"]), int(cache_info["block_size"])
    expected = {
        "two run while two wait for a LoRA slot",
        "running requests hold KV blocks",
        "KV blocks grow with generated tokens",
        "every adapter was listed once it ran",
        "idle: nothing running, nothing waiting, no KV blocks in use",
        "idle: no adapter listed",
        "a scrape landed while the second pair ran",
    }
    real_seen = run_over_adapters(engine.base_url, adapters)
    # Tokens 10 ms apart (2 s a request): each state lasts many scrapes, also when busy.
    with SimulatorCluster(config=replace(sim_config, itl_s=0.01)) as cluster:
        sim_seen = run_over_adapters(cluster.urls[0], adapters)
    # On the real engine, whether a scrape lands while two requests wait for a slot
    # depends on the machine's speed (seen both ways on a quiet 2-core machine): it must
    # never contradict the simulator (the per-scrape checks above), but may go unseen.
    # Likewise, on a loaded machine a scrape can take longer than the second pair of
    # requests runs: every adapter must then be listed only if a scrape landed while
    # that pair ran (the scrapes' and answers' times say whether one did).
    racy = {"two run while two wait for a LoRA slot", "a scrape landed while the second pair ran"}
    for name, seen in (("real engine", real_seen), ("simulator", sim_seen)):
        facts = scheduler_facts(seen, blocks, block_size)
        want = expected - racy if name == "real engine" else expected
        if name == "real engine" and "a scrape landed while the second pair ran" not in facts:
            want = want - {"every adapter was listed once it ran"}
        assert want <= facts <= expected, f"{name}: missing {want - facts}; scrapes: {trace(seen)}"


def trace(observed: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The distinct consecutive states scraped, for a failure message."""
    states = [
        (s["running"], s["waiting"], s["deferred"], round(s["usage"], 6),
         s["lora"].get("running_lora_adapters"))
        for s in observed
    ]  # fmt: skip
    return [st for i, st in enumerate(states) if i == 0 or st != states[i - 1]]


def families(text: str) -> dict[str, tuple[str, frozenset[str], tuple[str, ...]]]:
    """vLLM family -> (type, label names, histogram bucket bounds)."""
    out = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue  # process/python collectors of the API server
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        buckets = tuple(dict.fromkeys(
            s.labels["le"] for s in family.samples if s.name.endswith("_bucket")
        ))  # fmt: skip
        out[family.name] = (family.type, labels, buckets)
    return out


def test_metric_families_labels_and_buckets_match(engine, sim, cache_info):
    for url in (engine.base_url, sim):  # lora_requests_info appears with the first request
        assert httpx.post(url + C, json=comp(), timeout=60).status_code == 200
    real_text = httpx.get(engine.base_url + "/metrics", timeout=30)
    sim_text = httpx.get(sim + "/metrics", timeout=30)
    assert real_text.headers["content-type"] == sim_text.headers["content-type"]
    real, fake = families(real_text.text), families(sim_text.text)
    kept = {n: spec for n, spec in real.items() if n.removesuffix("_created") not in DELIBERATE}
    assert {n: kept[n] for n in sorted(kept)} == {n: fake[n] for n in sorted(fake) if n in kept}
    assert set(fake) - set(kept) == set(), "families the real engine does not have"
    sim_cache = family_samples(sim_text.text, "vllm:cache_config_info")[0][0]
    # Labels the real engine derives from the host, not from its flags: vLLM's CPU
    # platform resets the SSM cache dtype to float32 only on CPUs with AVX-512 BF16.
    host = {k: sim_cache[k] for k in ("kv_cache_memory_bytes", "mamba_ssm_cache_dtype")}
    assert sim_cache == {**cache_info, **host}


def prefix_counters(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    return tuple(  # type: ignore[return-value]
        sum(v for _, v in family_samples(text, name))
        for name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
    )


def prefix_deltas(url: str, requests: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(queried, hit) tokens each request adds to the prefix-cache counters."""
    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for body in requests:
            before = prefix_counters(url)
            r = client.post(C, json=body)
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 10
            while (after := prefix_counters(url)) == before and time.monotonic() < deadline:
                time.sleep(0.05)  # the engine logs its stats after the step
            out.append((after[0] - before[0], after[1] - before[1]))
    return out


def test_prefix_cache_hits_mean_the_same(engine, sim, cache_info):
    """A repeated prompt hits its cached blocks on the same adapter, not on another
    adapter nor under another cache_salt; the counters agree token for token."""
    block = int(cache_info["block_size"])
    run = f"{time.time_ns()}"  # prompts no earlier test sent, on either side
    prompt = prompt_text([(f"sys-{run}", 2 * block + 20), (f"q-{run}", 9)])
    body = {"prompt": prompt, "max_tokens": 1, "ignore_eos": True}
    sequence = [
        {"model": "chat", **body},
        {"model": "chat", **body},
        {"model": "coding", **body},
        {"model": "chat", "cache_salt": f"t-{run}", **body},
        {"model": "chat", "cache_salt": f"t-{run}", **body},
        {"model": "demo-base", **body},
    ]
    real = prefix_deltas(engine.base_url, sequence)
    fake = prefix_deltas(sim, sequence)
    tokens = real[0][0]
    assert abs(tokens - (2 * block + 29)) <= 1, real  # one token a word (+ BOS, if any)
    full = 2 * block  # whole blocks only
    assert real == [(tokens, 0), (tokens, full), (tokens, 0), (tokens, 0), (tokens, full),
                    (tokens, 0)], real  # fmt: skip
    assert fake == real


def test_kv_blocks_follow_from_the_model_and_the_kv_space(engine, demo_assets, cache_info):
    """bench/_kvcapacity.py's formula (what the routing benchmark derives its replicas' KV
    blocks with), fed the demo model's config.json, the engine's KV dtype and the KV space
    the testkit gives the CPU engine, gives the real engine's block count exactly."""
    config = json.loads((demo_assets.base / "config.json").read_text())
    # testkit's engine_command passes --dtype float32; cache_dtype "auto" follows it.
    assert cache_info["cache_dtype"] == "auto"
    shape = KvShape.from_config(config, dtype="float32")
    space = int(cpu_env()["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    assert shape.bytes_per_token == 2 * 2 * 2 * 64 * 4  # layers, KV heads, head_dim, fp32
    block = int(cache_info["block_size"])
    assert kv_blocks(shape, space, block) == int(cache_info["num_gpu_blocks"]), cache_info
