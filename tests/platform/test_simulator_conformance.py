"""The simulator's vLLM 0.32 behaviours that need no real engine to check: endpoints,
validation errors, stop strings, tokenizer counts, bad adapter paths, adapter-load
counter. (tests/e2e/test_simulator_conformance.py compares it with the real engine.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer, models, pre_tokenizers

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

CONFIG = SimConfig(
    model="tiny", check_adapter_paths=False, lora_modules={"a": "/a"}, max_model_len=64,
    output_tokens=8, tool_call_parser=None,
)  # fmt: skip
MESSAGES = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": "handoff", "parameters": {}}}]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with AsyncSimulatorCluster(config=CONFIG) as cluster:
        yield cluster.urls[0]


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: object = None
) -> tuple[int, object]:
    async with http.request(method, url, json=body) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


async def test_plain_endpoints_and_json_404_405(url, http):
    assert await call(http, "GET", url + "/ping") == (200, "")
    assert await call(http, "POST", url + "/ping") == (200, "")
    assert await call(http, "GET", url + "/version") == (200, {"version": "0.32.0"})
    assert await call(http, "GET", url + "/load") == (200, {"server_load": 0})
    assert await call(http, "GET", url + "/v1/nope") == (404, {"detail": "Not Found"})
    status, body = await call(http, "GET", url + "/v1/completions")
    assert (status, body) == (405, {"detail": "Method Not Allowed"})
    async with http.get(url + "/metrics") as resp:
        assert resp.headers["Content-Type"] == "text/plain; version=1.0.0; charset=utf-8"


@pytest.mark.parametrize(
    ("fields", "err_type", "param", "message"),
    [
        ({"max_tokens": "x"}, "Bad Request", "body.max_tokens", "Input should be a valid integer"),
        ({"temperature": "hot"}, "Bad Request", "body.temperature", "valid number"),
        ({"messages": "x"}, "Bad Request", "body.messages", "Input should be a valid list"),
        ({"max_tokens": 100}, "BadRequestError", "max_tokens",
         "max_tokens=100 cannot be greater than max_model_len=64. Please request fewer output "
         "tokens. (parameter=max_tokens, value=100)"),
        ({"messages": [{"role": "user", "content": "w " * 70}]}, "BadRequestError",
         "input_tokens", "your prompt contains at least 65 input tokens"),
        ({"temperature": -1}, "BadRequestError", "temperature",
         "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"),
        ({"temperature": 2.5}, "BadRequestError", "temperature", "must be in [0, 2]"),
        ({"n": 2, "temperature": 0}, "BadRequestError", None,
         "n must be 1 when using greedy sampling, got 2."),
        ({"structured_outputs": {"choice": []}}, "BadRequestError", None,
         "Choice '[]' cannot be an empty list"),
        ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "BadRequestError", None,
         "You can only use one kind of constraints"),
        ({"structured_outputs": {"foo": 1}}, "BadRequestError", None,
         "You must use one kind of structured outputs constraint"),
        ({"tools": TOOLS}, "BadRequestError", None,
         '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'),
        ({"tools": TOOLS, "tool_choice": "required"}, "BadRequestError", None,
         'tool_choice="required" requires --tool-call-parser to be set'),
        ({"messages": []}, "BadRequestError", None, "Cannot apply chat template"),
        ({"stop": [""]}, "BadRequestError", None, "stop cannot contain an empty string."),
    ],
)  # fmt: skip
async def test_chat_validation_errors_like_vllm(url, http, fields, err_type, param, message):
    body = {"model": "a", "messages": MESSAGES, **fields}
    status, answer = await call(http, "POST", url + "/v1/chat/completions", body)
    assert status == 400, answer
    assert isinstance(answer, dict)
    error = answer["error"]
    assert (error["type"], error["param"], error["code"]) == (err_type, param, 400)
    assert message in error["message"]


async def test_completion_errors_and_tool_choice_none(url, http):
    status, answer = await call(http, "POST", url + "/v1/completions", {"model": "a"})
    assert status == 400
    assert answer == {"error": {
        "message": "Either prompt or prompt_embeds must be provided and non-empty. "
        "(parameter=prompt)", "type": "BadRequestError", "param": "prompt", "code": 400,
    }}  # fmt: skip
    status, answer = await call(http, "POST", url + "/v1/completions", [1])
    assert status == 400
    assert isinstance(answer, dict)
    assert (answer["error"]["type"], answer["error"]["param"]) == ("Bad Request", "body")
    body = {"model": "a", "messages": MESSAGES, "tools": TOOLS, "tool_choice": "none"}
    status, _ = await call(http, "POST", url + "/v1/chat/completions", body)
    assert status == 200


async def test_stop_string_ends_the_reply_before_it(url, http):
    whole = {"model": "a", "prompt": "say something", "max_tokens": 8}
    status, full = await call(http, "POST", url + "/v1/completions", whole)
    assert status == 200
    assert isinstance(full, dict)
    text = full["choices"][0]["text"]
    stop = text.split(" ")[2][:2]  # part of the third word
    status, cut = await call(http, "POST", url + "/v1/completions", {**whole, "stop": [stop]})
    assert isinstance(cut, dict)
    choice = cut["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"] == text[: text.index(stop)]
    assert cut["usage"]["completion_tokens"] == 3
    status, exact = await call(http, "POST", url + "/v1/completions",
                               {**whole, "max_tokens": 20, "ignore_eos": True})  # fmt: skip
    assert isinstance(exact, dict)
    assert exact["usage"]["completion_tokens"] == 20
    assert exact["choices"][0]["finish_reason"] == "length"


def write_model_folder(folder: Path) -> None:
    """A word-level tokenizer with a chat template, as a model folder holds them."""
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "hello", "there", "user", "[", "]"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    template = (
        "{{ bos_token }}{% for m in messages %}[ {{ m['role'] }} ] {{ m['content'] }} "
        "{% endfor %}{% if add_generation_prompt %}[ assistant ]{% endif %}"
    )
    config = {"bos_token": "<s>", "chat_template": template}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


async def test_model_folder_tokenizer_counts_prompts_with_the_chat_template(tmp_path, http):
    write_model_folder(tmp_path)
    config = SimConfig(model="tiny", model_path=str(tmp_path), max_model_len=12)
    async with AsyncSimulatorCluster(config=config) as sims:
        base = sims.urls[0]
        body = {"prompt": "hello there hello", "max_tokens": 1}
        _, answer = await call(http, "POST", base + "/v1/completions", body)
        assert isinstance(answer, dict)
        assert answer["usage"]["prompt_tokens"] == 3
        body = {"messages": MESSAGES, "max_tokens": 1}
        _, answer = await call(http, "POST", base + "/v1/chat/completions", body)
        assert isinstance(answer, dict)
        # "<s>[ user ] hello there [ assistant ]": 8 words of the vocabulary or <unk>
        assert answer["usage"]["prompt_tokens"] == 8
        _, models_list = await call(http, "GET", base + "/v1/models")
        assert isinstance(models_list, dict)
        assert models_list["data"][0]["root"] == str(tmp_path)
        seven = "hello " * 7
        status, _ = await call(http, "POST", base + "/v1/completions",
                               {"prompt": seven, "max_tokens": 1})  # fmt: skip
        assert status == 200  # 7 tokens fit in 12
        long_chat = {"messages": [{"role": "user", "content": seven}], "max_tokens": 1}
        status, _ = await call(http, "POST", base + "/v1/chat/completions", long_chat)
        assert status == 400  # with the template's 6 tokens they do not


async def test_bad_adapter_path_is_404_and_the_name_stays_unknown(tmp_path, http):
    good = tmp_path / "good"
    good.mkdir()
    (good / "adapter_config.json").write_text("{}")
    config = SimConfig(model="tiny", check_adapter_paths=True)
    async with AsyncSimulatorCluster(config=config) as sims:
        base = sims.urls[0]
        load = {"lora_name": "bad", "lora_path": str(tmp_path / "missing")}
        status, answer = await call(http, "POST", base + "/v1/load_lora_adapter", load)
        assert status == 404
        assert answer == {"error": {
            "message": f"Loading lora bad failed: No adapter found for {tmp_path / 'missing'}",
            "type": "NotFoundError", "param": None, "code": 404,
        }}  # fmt: skip
        status, _ = await call(http, "POST", base + "/v1/completions",
                               {"model": "bad", "prompt": "x"})  # fmt: skip
        assert status == 404
        load = {"lora_name": "good", "lora_path": str(good)}
        assert (await call(http, "POST", base + "/v1/load_lora_adapter", load))[0] == 200
    with pytest.raises(ValueError, match="No adapter found"):
        AsyncSimulatorCluster(
            config=SimConfig(model="tiny", check_adapter_paths=True, lora_modules={"x": "/no"})
        )


def loads(text: str) -> dict[str, float]:
    return {
        s.labels["tier"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "mol_engine_adapter_loads"
        for s in f.samples
        if s.name.endswith("_total")
    }


async def test_adapter_loads_counter_counts_slot_and_host_loads(http):
    config = SimConfig(model="tiny", check_adapter_paths=False,
                       lora_modules={n: f"/{n}" for n in "abc"}, max_loras=1,
                       max_cpu_loras=2)  # fmt: skip
    async with AsyncSimulatorCluster(config=config) as sims:
        base = sims.urls[0]
        for model in ["a", "a", "b", "a"]:
            status, _ = await call(http, "POST", base + "/v1/completions",
                                   {"model": model, "prompt": "x"})  # fmt: skip
            assert status == 200
        async with http.get(base + "/metrics") as resp:
            text = await resp.text()
        state = sims.state()
    assert loads(text) == {"gpu": 3.0, "cpu": float(sum(state.cpu_loads.values()))}
    assert state.slot_loads == {"a": 2, "b": 1}


async def test_scheduler_metrics_only_keeps_what_a_router_reads(http):
    config = SimConfig(
        model="tiny", check_adapter_paths=False, lora_modules={"a": "/a"}, detailed_metrics=False
    )
    async with AsyncSimulatorCluster(config=config) as sims:
        base = sims.urls[0]
        status, _ = await call(http, "POST", base + "/v1/completions",
                               {"model": "a", "prompt": "x"})  # fmt: skip
        assert status == 200
        async with http.get(base + "/metrics") as resp:
            families = text_string_to_metric_families(await resp.text())
            names = {f.name for f in families if not f.name.endswith("_created")}
    assert names == {
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason", "vllm:kv_cache_usage_perc",
        "vllm:lora_requests_info", "vllm:cache_config_info", "mol_engine_adapter_loads",
    }  # fmt: skip


async def test_chat_template_refusal_is_a_400(tmp_path, http):
    write_model_folder(tmp_path)
    refusing = {"chat_template": "{{ raise_exception('roles must alternate') }}"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(refusing))
    async with AsyncSimulatorCluster(config=SimConfig(model_path=str(tmp_path))) as sims:
        status, answer = await call(http, "POST", sims.urls[0] + "/v1/chat/completions",
                                    {"messages": MESSAGES})  # fmt: skip
    assert status == 400
    assert isinstance(answer, dict)
    assert answer["error"]["type"] == "BadRequestError"
    assert "roles must alternate" in answer["error"]["message"]
